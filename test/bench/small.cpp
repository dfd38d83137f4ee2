// SPDX-License-Identifier: MIT
//
// The C++ file of the benchmark's g++ workload in a full run
// (scripts/bench.sh): a few standard headers, about a third of the compile
// time of test/programs/tp_cxx.cpp.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

int
count_words(const std::vector<std::string> &words)
{
	std::map<std::string, std::vector<int>> seen;
	for (size_t i = 0; i < words.size(); i++)
		seen[words[i]].push_back(static_cast<int>(i));
	int most = 0;
	for (auto &kv : seen) {
		std::sort(kv.second.begin(), kv.second.end());
		most = std::max(most, static_cast<int>(kv.second.size()));
	}
	return most;
}
