// SPDX-License-Identifier: MIT
//
// The smallest C++ input of the benchmark's g++ workload: its --quick input
// and the input of the peers that run on a small input (memcheck, jemalloc's
// profiler).  No standard header (parsing <vector> alone takes 14 s under
// memcheck): a class template, a function template, inheritance and virtual
// calls, so that cc1plus still parses, instantiates, optimises and writes an
// object file.
typedef unsigned long size_type;

template <typename T>
class Array {
public:
	explicit Array(size_type n) : data_(new T[n]()), size_(n) {}
	~Array() { delete[] data_; }
	Array(const Array &) = delete;
	Array &operator=(const Array &) = delete;
	T &operator[](size_type i) { return data_[i]; }
	const T &operator[](size_type i) const { return data_[i]; }
	size_type size() const { return size_; }

private:
	T *data_;
	size_type size_;
};

template <typename T, typename F>
static T
fold(const Array<T> &a, T init, F f)
{
	for (size_type i = 0; i < a.size(); i++)
		init = f(init, a[i]);
	return init;
}

struct Shape {
	virtual ~Shape() {}
	virtual long area() const = 0;
};

struct Rect : Shape {
	long w, h;
	Rect(long w_, long h_) : w(w_), h(h_) {}
	long area() const override { return w * h; }
};

struct Square : Rect {
	explicit Square(long s) : Rect(s, s) {}
};

long
total_area(int n)
{
	Array<Shape *> shapes(static_cast<size_type>(n));
	for (int i = 0; i < n; i++)
		shapes[i] = i % 2 ? static_cast<Shape *>(new Rect(i, i + 1)) : new Square(i);
	Array<long> areas(static_cast<size_type>(n));
	for (int i = 0; i < n; i++)
		areas[i] = shapes[i]->area();
	long sum = fold(areas, 0L, [](long a, long b) { return a + b; });
	long most = fold(areas, 0L, [](long a, long b) { return a > b ? a : b; });
	for (int i = 0; i < n; i++)
		delete shapes[i];
	return sum - most;
}
