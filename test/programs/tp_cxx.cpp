// SPDX-License-Identifier: MIT
//
// An ordinary C++ program: iostreams, std::string, containers, exceptions,
// std::thread, shared_ptr.  Its output is deterministic; run with and
// without the shim it must print the same and exit with the same status
// (3, so that a lost status shows).
#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace
{

struct Node {
	std::string name;
	std::vector<std::shared_ptr<Node>> children;
	explicit Node(std::string n) : name(std::move(n))
	{
	}
};

std::shared_ptr<Node>
build(int depth, const std::string &prefix)
{
	auto n = std::make_shared<Node>(prefix);
	if (depth > 0)
		for (int i = 0; i < 3; i++)
			n->children.push_back(build(depth - 1, prefix + "." + std::to_string(i)));
	return n;
}

size_t
count(const Node &n)
{
	size_t c = 1;
	for (const auto &ch : n.children)
		c += count(*ch);
	return c;
}

int
parse(const std::string &s)
{
	size_t pos = 0;
	int v = std::stoi(s, &pos);
	if (pos != s.size())
		throw std::invalid_argument("trailing characters in '" + s + "'");
	return v;
}

} // namespace

int
main()
{
	std::ios::sync_with_stdio(false);

	// strings and containers
	std::vector<std::string> words;
	for (int i = 0; i < 5000; i++)
		words.push_back("w" + std::to_string((i * 7919) % 5003));
	std::sort(words.begin(), words.end());
	words.erase(std::unique(words.begin(), words.end()), words.end());
	std::map<std::string, int> freq;
	std::unordered_map<int, std::string> by_len;
	for (const auto &w : words) {
		freq[w.substr(0, 2)]++;
		by_len[static_cast<int>(w.size())] += w.back();
	}
	std::cout << "unique words: " << words.size() << "\n";
	for (const auto &kv : freq)
		std::cout << kv.first << "=" << kv.second << " ";
	std::cout << "\n";
	std::cout << "lengths:";
	std::vector<int> lens;
	for (const auto &kv : by_len)
		lens.push_back(kv.first);
	std::sort(lens.begin(), lens.end());
	for (int l : lens)
		std::cout << " " << l << ":" << by_len[l].size();
	std::cout << "\n";

	// a tree of shared_ptr
	auto root = build(6, "r");
	std::cout << "tree nodes: " << count(*root) << "\n";
	root.reset();

	// exceptions
	int caught = 0;
	for (const char *s : { "12", "x3", "44z", "-7" }) {
		try {
			std::cout << "parse " << s << " -> " << parse(s) << "\n";
		} catch (const std::exception &e) {
			caught++;
			std::cout << "parse " << s << " failed: " << e.what() << "\n";
		}
	}
	std::cout << "caught " << caught << "\n";

	// threads, each building strings and vectors
	std::vector<std::thread> threads;
	std::vector<unsigned long> sums(4);
	for (int t = 0; t < 4; t++)
		threads.emplace_back([t, &sums] {
			std::vector<std::unique_ptr<std::string>> v;
			for (int i = 0; i < 20000; i++)
				v.push_back(
				        std::make_unique<std::string>(std::to_string(i * (t + 1))));
			unsigned long s = 0;
			for (const auto &p : v)
				s += p->size();
			sums[static_cast<size_t>(t)] = s;
		});
	for (auto &th : threads)
		th.join();
	for (int t = 0; t < 4; t++)
		std::cout << "thread " << t << " sum " << sums[static_cast<size_t>(t)] << "\n";

	// a string stream
	std::ostringstream os;
	for (int i = 0; i < 1000; i++)
		os << i << ',';
	std::string csv = os.str();
	std::cout << "csv length " << csv.size() << " checksum "
	          << std::accumulate(csv.begin(), csv.end(), 0UL,
	                             [](unsigned long a, char c) {
		                             return a * 31 + static_cast<unsigned char>(c);
	                             })
	          << "\n";
	std::cout.flush();
	return 3;
}
