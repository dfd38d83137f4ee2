/* SPDX-License-Identifier: MIT */
/* Leak classes by reachability (see core/leak_scan.h).  Never allocates through malloc. */
#include "core/leak_scan.h"

#include "core/log.h"
#include "core/thread.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/common.h"

/*
 * Under valgrind's memcheck (the shim's own memcheck tests) the scan reads
 * words whatever they hold, defined or not: each word read is declared
 * defined, so that only a read of unmapped memory would be an error.
 */
#if __has_include(<valgrind/memcheck.h>)
#	include <valgrind/memcheck.h>
#	define TFA_HAVE_MEMCHECK 1
#endif

/* ---- the pure core ---------------------------------------------------------------------- */

static void
sift_down(tfa_leak_block_t *b, size_t root, size_t n)
{
	for (;;) {
		size_t child = 2 * root + 1;
		if (child >= n)
			return;
		if (child + 1 < n && b[child + 1].addr > b[child].addr)
			child++;
		if (b[root].addr >= b[child].addr)
			return;
		tfa_leak_block_t t = b[root];
		b[root] = b[child];
		b[child] = t;
		root = child;
	}
}

static void
heap_sort(tfa_leak_block_t *b, size_t n)
{
	if (n < 2)
		return;
	for (size_t i = n / 2; i-- > 0;)
		sift_down(b, i, n);
	for (size_t end = n - 1; end > 0; end--) {
		tfa_leak_block_t t = b[0];
		b[0] = b[end];
		b[end] = t;
		sift_down(b, 0, end);
	}
}

static TFA_ALWAYS_INLINE void
swap_blocks(tfa_leak_block_t *x, tfa_leak_block_t *y)
{
	tfa_leak_block_t t = *x;
	*x = *y;
	*y = t;
}

static void
insertion_sort(tfa_leak_block_t *b, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		tfa_leak_block_t t = b[i];
		size_t j = i;
		for (; j > 0 && b[j - 1].addr > t.addr; j--)
			b[j] = b[j - 1];
		b[j] = t;
	}
}

/*
 * Quicksort (Hoare's partition around the median of three), the smaller part
 * first by recursion and the larger by the loop, insertion sort below 17
 * blocks, heap sort past depth levels.  Heap sort alone took 572
 * instructions a block on 300,000 live blocks at exit (35% of a run that
 * made them, callgrind), its sift through the whole array missing the cache
 * at every level.
 */
void
tfa_leak_sort_limited(tfa_leak_block_t *b, size_t n, unsigned depth)
{
	while (n > 16) {
		if (depth == 0) {
			heap_sort(b, n);
			return;
		}
		depth--;
		size_t mid = n / 2;
		if (b[mid].addr < b[0].addr)
			swap_blocks(&b[mid], &b[0]);
		if (b[n - 1].addr < b[0].addr)
			swap_blocks(&b[n - 1], &b[0]);
		if (b[n - 1].addr < b[mid].addr)
			swap_blocks(&b[n - 1], &b[mid]);
		uintptr_t pivot = b[mid].addr;
		/* Hoare's scheme: [0, j] <= pivot <= (j, n), and 0 <= j < n - 1. */
		size_t i = (size_t)-1, j = n;
		for (;;) {
			do
				i++;
			while (b[i].addr < pivot);
			do
				j--;
			while (b[j].addr > pivot);
			if (i >= j)
				break;
			swap_blocks(&b[i], &b[j]);
		}
		size_t left = j + 1, right = n - left;
		if (left < right) {
			tfa_leak_sort_limited(b, left, depth);
			b += left;
			n = right;
		} else {
			tfa_leak_sort_limited(b + left, right, depth);
			n = left;
		}
	}
	insertion_sort(b, n);
}

void
tfa_leak_sort(tfa_leak_block_t *b, size_t n)
{
	unsigned depth = 0;

	for (size_t k = n; k > 1; k >>= 1)
		depth += 2;
	tfa_leak_sort_limited(b, n, depth);
}

/* The last block of b[lo, hi) whose start is <= addr, given that b[lo - 1]'s is: -1 for none. */
static TFA_ALWAYS_INLINE long
find_in(const tfa_leak_block_t *b, size_t lo, size_t hi, uintptr_t addr, bool *start)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (b[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	const tfa_leak_block_t *k = &b[lo - 1];
	uintptr_t off = addr - k->addr;
	if (off != 0 && off >= k->size)
		return -1;
	*start = off == 0;
	return (long)(lo - 1);
}

void
tfa_leak_index_build(tfa_leak_index_t *x, const tfa_leak_block_t *b, size_t n, uintptr_t min,
		     uintptr_t max)
{
	*x = (tfa_leak_index_t){ .b = b, .n = n, .min = min };
	if (n == 0 || max <= min || n > UINT32_MAX)
		return;
	/*
	 * At most one bucket a block (4 bytes: the scan's other structures take
	 * about 48 a live block), of 2^shift bytes each: one to two blocks a
	 * bucket on a dense heap.
	 */
	uintptr_t span = max - min;
	unsigned shift = 0;
	while ((span >> shift) > (uintptr_t)n)
		shift++;
	size_t nb = (size_t)((span - 1) >> shift) + 1;
	size_t bytes = (nb + 1) * sizeof(uint32_t);
	uint32_t *first = tfa_arena_map(bytes);
	if (first == NULL)
		return;
	size_t i = 0;
	for (size_t j = 0; j <= nb; j++) {
		uintptr_t at = j == nb ? max : min + ((uintptr_t)j << shift);
		while (i < n && b[i].addr < at)
			i++;
		first[j] = (uint32_t)i;
	}
	x->shift = shift;
	x->nbuckets = nb;
	x->first = first;
	x->bytes = bytes;

	unsigned page_shift = 12;
	while ((span >> page_shift) > (uintptr_t)n * 64)
		page_shift++;
	size_t nbits = (size_t)((span - 1) >> page_shift) + 1;
	size_t page_bytes = (nbits + 63) / 64 * sizeof(uint64_t);
	uint64_t *pages = tfa_arena_map(page_bytes);
	if (pages == NULL)
		return;
	for (size_t k = 0; k < n; k++) {
		uintptr_t end = b[k].addr + (b[k].size != 0 ? b[k].size : 1);
		if (end < b[k].addr || end > max)
			end = max;
		size_t p = (size_t)((b[k].addr - min) >> page_shift), last = (size_t)((end - 1 - min) >> page_shift);
		for (; p <= last; p++)
			pages[p / 64] |= (uint64_t)1 << (p % 64);
	}
	x->page_shift = page_shift;
	x->pages = pages;
	x->page_bytes = page_bytes;
}

void
tfa_leak_index_free(tfa_leak_index_t *x)
{
	if (x->first != NULL)
		tfa_arena_unmap(x->first, x->bytes);
	x->first = NULL;
	if (x->pages != NULL)
		tfa_arena_unmap(x->pages, x->page_bytes);
	x->pages = NULL;
}

static TFA_ALWAYS_INLINE long
index_find(const tfa_leak_index_t *x, uintptr_t addr, bool *start)
{
	if (x->first == NULL)
		return find_in(x->b, 0, x->n, addr, start);
	if (x->pages != NULL) {
		size_t p = (size_t)((addr - x->min) >> x->page_shift);
		if (((x->pages[p / 64] >> (p % 64)) & 1) == 0)
			return -1;
	}
	size_t j = (size_t)((addr - x->min) >> x->shift);
	/* Blocks before first[j] start before the bucket, those from first[j + 1] after addr. */
	return find_in(x->b, x->first[j], x->first[j + 1], addr, start);
}

long
tfa_leak_index_find(const tfa_leak_index_t *x, uintptr_t addr, bool *start)
{
	return index_find(x, addr, start);
}

long
tfa_leak_find(const tfa_leak_block_t *b, size_t n, uintptr_t addr, bool *start)
{
	return find_in(b, 0, n, addr, start);
}

/* Memory of any type read as words. */
typedef uintptr_t __attribute__((may_alias)) tfa_word_t;

struct scan {
	tfa_leak_block_t *b;
	size_t n;
	tfa_leak_index_t index;
	uintptr_t min, max; /* every block lies in [min, max) */
	uint32_t *work;
	size_t top;
	bool valgrind; /* running under valgrind */
	bool in_place; /* no other thread can unmap what is read: no copies through the kernel */
	uint64_t scanned; /* bytes read */
};

/* Marking from the roots: memcheck's lc_push_without_clique_if_a_chunk_ptr. */
static TFA_ALWAYS_INLINE void
mark(struct scan *s, uintptr_t v, bool prior_definite)
{
	bool start;
	long i = index_find(&s->index, v, &start);

	if (i < 0)
		return;
	tfa_leak_block_t *k = &s->b[i];
	if (k->cls == TFA_LEAK_CLASS_REACHABLE)
		return;
	if (start && prior_definite) {
		k->cls = TFA_LEAK_CLASS_REACHABLE;
		s->work[s->top++] = (uint32_t)i;
	} else if (k->cls == TFA_LEAK_CLASS_UNREACHED) {
		k->cls = TFA_LEAK_CLASS_POSSIBLE;
		s->work[s->top++] = (uint32_t)i;
	}
}

/* A clique's scan: memcheck's lc_push_with_clique_if_a_chunk_ptr (any pointer counts). */
static TFA_ALWAYS_INLINE void
claim(struct scan *s, uintptr_t v, size_t leader)
{
	bool start;
	long i = index_find(&s->index, v, &start);

	if (i < 0 || (size_t)i == leader || s->b[i].cls != TFA_LEAK_CLASS_UNREACHED)
		return;
	s->b[i].cls = TFA_LEAK_CLASS_INDIRECT;
	s->work[s->top++] = (uint32_t)i;
}

/*
 * How far ahead of the words the scan reads it prefetches: past the page the
 * hardware's prefetcher stays in.  g++'s exit scan, samples over 5 runs (mean of two):
 * 2,000 at 1 KiB, 1,958 at 2 KiB, 1,938 at 4 KiB, 1,942 at 8 KiB.
 */
#define PREFETCH_AHEAD 2048

static TFA_ALWAYS_INLINE void
visit(struct scan *s, uintptr_t v, bool prior_definite, long leader)
{
	if (leader < 0)
		mark(s, v, prior_definite);
	else
		claim(s, v, (size_t)leader);
}

static TFA_ALWAYS_INLINE void
scan_words(struct scan *s, uintptr_t lo, uintptr_t hi, bool prior_definite, long leader, bool vg)
{
	uintptr_t w = (lo + sizeof(uintptr_t) - 1) & ~(uintptr_t)(sizeof(uintptr_t) - 1);

	if (hi < sizeof(uintptr_t))
		return;
	if (!vg) {
		/*
		 * Four words a step and one branch for the four: most words lie
		 * outside the blocks' span, and which ones do is data the branch
		 * predictor cannot learn (cc1plus's roots: 27% of 7.5 million).
		 */
		uintptr_t min = s->min, span = s->max - s->min;
		while (w <= hi && hi - w >= 4 * sizeof(uintptr_t)) {
			const volatile tfa_word_t *q = (const volatile tfa_word_t *)w;
			if ((w & 63) == 0)
				__builtin_prefetch((const void *)(w + PREFETCH_AHEAD));
			uintptr_t v0 = q[0], v1 = q[1], v2 = q[2], v3 = q[3];
			w += 4 * sizeof(uintptr_t);
			if (tfa_likely((unsigned)(v0 - min < span) + (unsigned)(v1 - min < span)
				       + (unsigned)(v2 - min < span) + (unsigned)(v3 - min < span) == 0))
				continue;
			if (v0 - min < span)
				visit(s, v0, prior_definite, leader);
			if (v1 - min < span)
				visit(s, v1, prior_definite, leader);
			if (v2 - min < span)
				visit(s, v2, prior_definite, leader);
			if (v3 - min < span)
				visit(s, v3, prior_definite, leader);
		}
	}
	for (; w <= hi - sizeof(uintptr_t); w += sizeof(uintptr_t)) {
		uintptr_t v = *(const volatile tfa_word_t *)w;
#ifdef TFA_HAVE_MEMCHECK
		if (vg)
			(void)VALGRIND_MAKE_MEM_DEFINED(&v, sizeof(v));
#else
		(void)vg;
#endif
		if (v < s->min || v >= s->max)
			continue;
		visit(s, v, prior_definite, leader);
	}
}

/*
 * Every aligned word of [lo, hi).  Not instrumented: roots hold a sanitizer's
 * redzones, and reading them here is no error of the program.
 */
__attribute__((no_sanitize("address"))) static void
scan_range(struct scan *s, uintptr_t lo, uintptr_t hi, bool prior_definite, long leader)
{
	s->scanned += hi > lo ? hi - lo : 0;
	if (tfa_unlikely(s->valgrind))
		scan_words(s, lo, hi, prior_definite, leader, true);
	else
		scan_words(s, lo, hi, prior_definite, leader, false);
}

/*
 * Memory another thread may unmap while the scan runs (a pymalloc arena its
 * last free returns, a thread's stack as the thread ends, a large block freed
 * by munmap) is copied with process_vm_readv, which says EFAULT of a page
 * that is gone instead of raising SIGSEGV: such a page is skipped.  Where the
 * system call is refused (a seccomp filter), the words are read in place.
 */
#define SAFE_READ_MIN ((size_t)64 << 10) /* blocks this large: the ones allocators unmap */
static uint64_t safe_buf[(64 << 10) / sizeof(uint64_t)];
static bool safe_read_refused;

static void
scan_range_safe(struct scan *s, uintptr_t lo, uintptr_t hi, bool prior_definite, long leader)
{
	if (s->in_place) {
		scan_range(s, lo, hi, prior_definite, leader);
		return;
	}
	lo = (lo + sizeof(uintptr_t) - 1) & ~(uintptr_t)(sizeof(uintptr_t) - 1);
	while (!safe_read_refused && hi > lo && hi - lo >= sizeof(uintptr_t)) {
		size_t want = TFA_MIN((size_t)(hi - lo), sizeof(safe_buf)) & ~(sizeof(uintptr_t) - 1);
		struct iovec local = { .iov_base = safe_buf, .iov_len = want };
		struct iovec remote = { .iov_base = (void *)lo, .iov_len = want };
		int saved_errno = errno;
		ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
		int err = errno;
		errno = saved_errno;
		if (got < 0 && err != EFAULT) {
			safe_read_refused = true;
			break;
		}
		if (got <= 0) {
			/* The page at lo is gone: on to the next one. */
			lo = (lo | 4095) + 1;
			continue;
		}
		uintptr_t b = (uintptr_t)safe_buf;
		scan_range(s, b, b + ((size_t)got & ~(sizeof(uintptr_t) - 1)), prior_definite, leader);
		lo += (size_t)got & ~(sizeof(uintptr_t) - 1);
		if ((size_t)got < want)
			lo = (lo | 4095) + 1;
	}
	if (safe_read_refused && hi > lo)
		scan_range(s, lo, hi, prior_definite, leader);
}

static void
scan_block(struct scan *s, size_t i, long leader)
{
	const tfa_leak_block_t *k = &s->b[i];

	if ((k->flags & TFA_LEAK_NOSCAN) != 0 || k->size == 0)
		return;
	uintptr_t hi = k->addr + k->size < k->addr ? UINTPTR_MAX : (uintptr_t)(k->addr + k->size);
	if (k->size >= SAFE_READ_MIN)
		scan_range_safe(s, k->addr, hi, k->cls == TFA_LEAK_CLASS_REACHABLE, leader);
	else
		scan_range(s, k->addr, hi, k->cls == TFA_LEAK_CLASS_REACHABLE, leader);
}

uint64_t
tfa_leak_classify(tfa_leak_block_t *b, size_t n, const tfa_leak_range_t *roots, size_t nroots,
		  uint32_t *work, bool alone)
{
	struct scan s = { .b = b, .n = n, .work = work, .min = UINTPTR_MAX, .max = 0 };

#ifdef TFA_HAVE_MEMCHECK
	s.valgrind = RUNNING_ON_VALGRIND != 0;
#endif
	/* Under memcheck the copy keeps reads of what the program freed out of its error count. */
	s.in_place = alone && !s.valgrind;

	for (size_t i = 0; i < n; i++) {
		b[i].cls = TFA_LEAK_CLASS_UNREACHED;
		uintptr_t end = b[i].addr + (b[i].size != 0 ? b[i].size : 1);
		if (end < b[i].addr)
			end = UINTPTR_MAX;
		s.min = TFA_MIN(s.min, b[i].addr);
		s.max = TFA_MAX(s.max, end);
	}
	if (n == 0)
		return 0;
	tfa_leak_index_build(&s.index, b, n, s.min, s.max);

	/*
	 * Marking: a block enters the worklist when its state rises (at most
	 * twice: Possible, Reachable), so 2n entries always suffice.
	 */
	for (size_t r = 0; r < nroots; r++) {
		scan_range_safe(&s, roots[r].lo, roots[r].hi, true, -1);
		while (s.top > 0) {
			uint32_t i = s.work[--s.top];
			scan_block(&s, i, -1);
		}
	}

	/*
	 * Cliques, in address order: each block still unreached leads one; the
	 * unreached blocks it reaches are indirect.  A leader reached later by
	 * another clique becomes indirect too.  Each block enters the worklist
	 * once as a member (and once as a leader).
	 */
	for (size_t i = 0; i < n; i++) {
		if (b[i].cls != TFA_LEAK_CLASS_UNREACHED)
			continue;
		s.work[s.top++] = (uint32_t)i;
		while (s.top > 0) {
			uint32_t j = s.work[--s.top];
			scan_block(&s, j, (long)i);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (b[i].cls == TFA_LEAK_CLASS_UNREACHED)
			b[i].cls = TFA_LEAK_CLASS_DEFINITE;
	tfa_leak_index_free(&s.index);
	return s.scanned;
}

/* ---- the process's mappings -------------------------------------------------------------- */

static size_t
round_page(size_t bytes)
{
	return (bytes + 4095) & ~(size_t)4095;
}

static const char *
parse_hex(const char *p, const char *end, uintptr_t *out)
{
	uintptr_t v = 0;
	bool any = false;

	for (; p < end; p++) {
		unsigned d;
		if (*p >= '0' && *p <= '9')
			d = (unsigned)(*p - '0');
		else if (*p >= 'a' && *p <= 'f')
			d = (unsigned)(*p - 'a' + 10);
		else if (*p >= 'A' && *p <= 'F')
			d = (unsigned)(*p - 'A' + 10);
		else
			break;
		v = (v << 4) | d;
		any = true;
	}
	*out = v;
	return any ? p : NULL;
}

static tfa_kept_fd_t kept_maps = TFA_KEPT_FD_NONE;

void
tfa_leak_keep_maps(void)
{
	if (!tfa_kept_fd_ours(&kept_maps)) {
		int saved_errno = errno;
		int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			tfa_kept_fd_take(&kept_maps, fd);
		errno = saved_errno;
	}
}

void
tfa_leak_drop_maps(void)
{
	tfa_kept_fd_drop(&kept_maps);
}

/* A descriptor reading the kept /proc/self/maps from its start (the kernel makes it anew), or -1. */
static int
kept_maps_again(void)
{
	int fd = tfa_kept_fd_dup(&kept_maps);
	if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Reads a whole /proc file into arena memory (*bytes mapped); NULL on failure. */
static char *
read_proc_file(const char *path, size_t cap, size_t *len, size_t *bytes)
{
	char *buf = tfa_arena_map(cap);
	int fd;

	*len = 0;
	*bytes = cap;
	if (buf == NULL)
		return NULL;
	bool maps = strcmp(path, "/proc/self/maps") == 0;
	fd = maps ? tfa_open_proc_self("maps") : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && maps)
		fd = kept_maps_again();
	if (fd < 0) {
		tfa_arena_unmap(buf, cap);
		return NULL;
	}
	for (;;) {
		if (*len == cap) {
			char *bigger = tfa_arena_map(cap * 2);
			if (bigger == NULL) {
				tfa_arena_unmap(buf, cap);
				close(fd);
				return NULL;
			}
			memcpy(bigger, buf, *len);
			tfa_arena_unmap(buf, cap);
			buf = bigger;
			cap *= 2;
			*bytes = cap;
		}
		ssize_t r = read(fd, buf + *len, cap - *len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		*len += (size_t)r;
	}
	close(fd);
	return buf;
}

/* Whether the rest of a maps line, after the permissions, names no file (inode 0, no path). */
static bool
anonymous(const char *p, const char *eol)
{
	int field = 0;

	/* offset, device, inode, [path] */
	while (p < eol) {
		while (p < eol && *p == ' ')
			p++;
		if (p == eol)
			break;
		const char *tok = p;
		while (p < eol && *p != ' ')
			p++;
		field++;
		if (field == 3 && !(p - tok == 1 && tok[0] == '0'))
			return false;
		if (field == 4)
			return false;
	}
	return field == 3;
}

int
tfa_leak_maps_read(tfa_leak_maps_t *m)
{
	size_t len, bytes, lines = 0;
	char *text = read_proc_file("/proc/self/maps", 64 << 10, &len, &bytes);

	memset(m, 0, sizeof(*m));
	/*
	 * Read again into a buffer mapped beforehand and kept until
	 * tfa_leak_maps_free: every mapping listed is then still there when
	 * the scan reads it (the first buffer, gone now, is not listed).
	 */
	for (int attempt = 0; text != NULL && attempt < 4; attempt++) {
		size_t want = round_page(len * 2 + 4096);
		tfa_arena_unmap(text, bytes);
		text = read_proc_file("/proc/self/maps", want, &len, &bytes);
		if (text != NULL && bytes == want)
			break;
	}
	if (text == NULL)
		return -ENOENT;
	m->text = text;
	m->text_bytes = bytes;
	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	m->bytes = round_page(3 * (lines + 1) * sizeof(*m->r));
	m->r = tfa_arena_map(m->bytes);
	if (m->r == NULL) {
		tfa_leak_maps_free(m);
		return -ENOMEM;
	}
	m->guarded = m->r + lines + 1;
	m->anon = m->guarded + lines + 1;
	uintptr_t prev_hi = 0;
	bool prev_none = false;
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (eol == NULL)
			eol = end;
		uintptr_t lo, hi;
		const char *q = parse_hex(p, eol, &lo);
		if (q != NULL && q < eol && *q == '-')
			q = parse_hex(q + 1, eol, &hi);
		else
			q = NULL;
		/* "lo-hi rwxp ...": readable ones only. */
		if (q != NULL && q + 5 < eol && hi > lo) {
			const char *perms = q + 1;
			if (perms[0] == 'r') {
				m->r[m->n].lo = lo;
				m->r[m->n].hi = hi;
				m->n++;
			}
			/*
			 * "rw-p 00000000 00:00 0" and no path: anonymous.  Any
			 * readable private one is a root: a JIT's code (a JVM's
			 * code cache, rwxp) holds pointers to the blocks that
			 * describe it, which were "definitely lost" while only
			 * rw-p was scanned (a JVM: 238 KB at 335 sites).
			 */
			bool anon = perms[0] == 'r' && perms[3] == 'p' && anonymous(perms + 4, eol);
			if (anon) {
				if (memcmp(perms, "rw-p", 4) == 0 && prev_none && prev_hi == lo) {
					m->guarded[m->nguarded].lo = lo;
					m->guarded[m->nguarded].hi = hi;
					m->nguarded++;
				} else {
					m->anon[m->nanon].lo = lo;
					m->anon[m->nanon].hi = hi;
					m->nanon++;
				}
			}
			prev_none = memcmp(perms, "---p", 4) == 0;
			prev_hi = hi;
		}
		p = eol + 1;
	}
	return 0;
}

void
tfa_leak_maps_free(tfa_leak_maps_t *m)
{
	tfa_arena_unmap(m->r, m->bytes);
	tfa_arena_unmap(m->text, m->text_bytes);
	memset(m, 0, sizeof(*m));
}

/* Index of the last mapping starting at or below addr, or -1. */
static long
maps_index(const tfa_leak_maps_t *m, uintptr_t addr)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->r[mid].lo <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (long)lo - 1;
}

bool
tfa_leak_maps_find(const tfa_leak_maps_t *m, uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
	long i = maps_index(m, addr);

	if (i < 0 || addr >= m->r[i].hi)
		return false;
	*lo = m->r[i].lo;
	*hi = m->r[i].hi;
	return true;
}

bool
tfa_leak_maps_readable(const tfa_leak_maps_t *m, uintptr_t lo, uintptr_t hi)
{
	long i = maps_index(m, lo);

	if (i < 0 || lo >= m->r[i].hi)
		return false;
	while (m->r[i].hi < hi) {
		if ((size_t)i + 1 >= m->n || m->r[i + 1].lo != m->r[i].hi)
			return false;
		i++;
	}
	return true;
}

/* ---- roots ---------------------------------------------------------------------------------- */

static void
roots_push(tfa_leak_roots_t *roots, uintptr_t lo, uintptr_t hi)
{
	if (hi <= lo)
		return;
	if (roots->n == roots->cap) {
		size_t cap = roots->cap == 0 ? 256 : roots->cap * 2;
		size_t bytes = round_page(cap * sizeof(*roots->r));
		tfa_leak_range_t *r = tfa_arena_map(bytes);
		if (r == NULL)
			return; /* a root less: blocks it holds look lost */
		if (roots->n != 0)
			memcpy(r, roots->r, roots->n * sizeof(*r));
		tfa_arena_unmap(roots->r, roots->bytes);
		roots->r = r;
		roots->bytes = bytes;
		roots->cap = bytes / sizeof(*r);
	}
	roots->r[roots->n].lo = lo;
	roots->r[roots->n].hi = hi;
	roots->n++;
}

void
tfa_leak_roots_add(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps, uintptr_t lo, uintptr_t hi)
{
	if (maps == NULL || maps->n == 0) {
		roots_push(roots, lo, hi);
		return;
	}
	long i = maps_index(maps, lo);
	if (i < 0)
		i = 0;
	for (; (size_t)i < maps->n && maps->r[i].lo < hi; i++) {
		uintptr_t a = TFA_MAX(lo, maps->r[i].lo), z = TFA_MIN(hi, maps->r[i].hi);
		roots_push(roots, a, z);
	}
}

/* Whether a live block overlaps [lo, hi). */
static bool
holds_block(const tfa_leak_block_t *b, size_t n, uintptr_t lo, uintptr_t hi)
{
	size_t a = 0, z = n;

	while (a < z) { /* the first block starting at or above lo */
		size_t mid = a + (z - a) / 2;
		if (b[mid].addr < lo)
			a = mid + 1;
		else
			z = mid;
	}
	if (a < n && b[a].addr < hi)
		return true;
	return a > 0 && b[a - 1].addr + (b[a - 1].size != 0 ? b[a - 1].size : 1) > lo;
}

static uint64_t
add_anon_piece(tfa_leak_roots_t *roots, const tfa_leak_block_t *b, size_t n, uintptr_t lo,
	       uintptr_t hi)
{
	if (hi <= lo || holds_block(b, n, lo, hi))
		return 0;
	roots_push(roots, lo, hi);
	return hi - lo;
}

/* [lo, hi) of an anonymous mapping without the excluded ranges in it (sorted by lo). */
static uint64_t
add_anon_range(tfa_leak_roots_t *roots, const tfa_leak_range_t *excl, size_t nexcl, const tfa_leak_block_t *b,
	       size_t n, uintptr_t lo, uintptr_t hi)
{
	uint64_t bytes = 0;
	uintptr_t cur = lo;

	/* What lies between the excluded ranges is the program's. */
	for (size_t j = 0; j < nexcl && excl[j].lo < hi; j++) {
		if (excl[j].hi <= cur)
			continue;
		if (excl[j].lo > cur)
			bytes += add_anon_piece(roots, b, n, cur, excl[j].lo);
		cur = TFA_MAX(cur, excl[j].hi);
		if (cur >= hi)
			break;
	}
	if (cur < hi)
		bytes += add_anon_piece(roots, b, n, cur, hi);
	return bytes;
}

/* Shell sort by lo (Ciura's gaps): no allocation, and a few thousand ranges at most. */
static void
sort_ranges(tfa_leak_range_t *r, size_t n)
{
	static const size_t gaps[] = { 701, 301, 132, 57, 23, 10, 4, 1 };

	for (size_t g = 0; g < TFA_ARRAY_SIZE(gaps); g++) {
		size_t gap = gaps[g];
		for (size_t i = gap; i < n; i++) {
			tfa_leak_range_t t = r[i];
			size_t j = i;
			for (; j >= gap && r[j - gap].lo > t.lo; j -= gap)
				r[j] = r[j - gap];
			r[j] = t;
		}
	}
}

uint64_t
tfa_leak_roots_add_anon(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps,
			const tfa_leak_range_t *own, size_t nown, const tfa_leak_block_t *b, size_t n)
{
	uint64_t bytes = 0;

#ifdef TFA_HAVE_MEMCHECK
	/* Under valgrind the list holds valgrind's own mappings, which the program cannot read. */
	if (RUNNING_ON_VALGRIND)
		return 0;
#endif
	/*
	 * Left out: the shim's mappings, the excluded module's range (its .bss
	 * past the file is an anonymous mapping), and what is a root already:
	 * the part of a module's .bss past its file is scanned with the module
	 * (libpython's 270 KiB, git's 155 KiB were read twice).
	 */
	size_t nroots = roots->n, nexcl = nown + nroots + 2;
	size_t excl_bytes = round_page(nexcl * sizeof(tfa_leak_range_t));
	tfa_leak_range_t *excl = tfa_arena_map(excl_bytes);
	if (excl == NULL) {
		/* No memory for the list: the shim's mappings and module only (own is sorted), roots read twice. */
		for (size_t i = 0; i < maps->nanon + maps->nguarded; i++) {
			const tfa_leak_range_t *m = i < maps->nanon ? &maps->anon[i] : &maps->guarded[i - maps->nanon];
			uintptr_t lo = m->lo, hi = m->hi;
			if (i >= maps->nanon && tfa_leak_find_tcb(lo, hi) != 0)
				continue;
			uintptr_t cut_lo = TFA_MAX(lo, roots->self_lo), cut_hi = TFA_MIN(hi, roots->self_hi);
			if (cut_lo < cut_hi) {
				bytes += add_anon_range(roots, own, nown, b, n, lo, cut_lo);
				bytes += add_anon_range(roots, own, nown, b, n, cut_hi, hi);
			} else {
				bytes += add_anon_range(roots, own, nown, b, n, lo, hi);
			}
		}
		return bytes;
	}
	memcpy(excl, own, nown * sizeof(*own));
	if (nroots != 0)
		memcpy(excl + nown, roots->r, nroots * sizeof(*roots->r));
	excl[nexcl - 2] = (tfa_leak_range_t){ roots->self_lo, roots->self_hi };
	excl[nexcl - 1] = (tfa_leak_range_t){ roots->self_tls_lo, roots->self_tls_hi };
	sort_ranges(excl, nexcl);
	for (size_t i = 0; i < maps->nanon; i++)
		bytes += add_anon_range(roots, excl, nexcl, b, n, maps->anon[i].lo, maps->anon[i].hi);
	/*
	 * A guarded mapping without a thread control block at its top is no
	 * glibc thread stack: the committed part of a reservation (a JVM's
	 * metaspace and heap are PROT_NONE reservations with rw-p pieces),
	 * which holds pointers as any anonymous mapping does.  Its blocks had
	 * been "definitely lost" (a JVM: 1,163 blocks at 249 sites).
	 */
	for (size_t i = 0; i < maps->nguarded; i++)
		if (tfa_leak_find_tcb(maps->guarded[i].lo, maps->guarded[i].hi) == 0)
			bytes += add_anon_range(roots, excl, nexcl, b, n, maps->guarded[i].lo, maps->guarded[i].hi);
	tfa_arena_unmap(excl, excl_bytes);
	return bytes;
}

void
tfa_leak_roots_free(tfa_leak_roots_t *roots)
{
	tfa_arena_unmap(roots->r, roots->bytes);
	memset(roots, 0, sizeof(*roots));
}

struct phdr_walk {
	tfa_leak_roots_t *roots;
	const tfa_leak_maps_t *maps;
	uintptr_t self;
	uintptr_t tp;             /* the calling thread's thread pointer */
	/*
	 * Where the excluded module's TLS block lies below any thread's
	 * thread pointer (the same offset in every thread: static TLS), and
	 * its size; 0: none.  In another thread's stack mapping it is cut out.
	 */
	uintptr_t self_tls_below;
	uintptr_t self_tls_size;
};

static int
phdr_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct phdr_walk *w = arg;

	(void)size;
	if (w->self != 0) {
		for (size_t i = 0; i < info->dlpi_phnum; i++) {
			const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
			uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
			if (ph->p_type == PT_LOAD && w->self >= lo && w->self - lo < ph->p_memsz) {
				uintptr_t self_lo = UINTPTR_MAX, self_hi = 0;
				for (size_t j = 0; j < info->dlpi_phnum; j++) {
					const ElfW(Phdr) *t = &info->dlpi_phdr[j];
					uintptr_t data = (uintptr_t)info->dlpi_tls_data;
					if (t->p_type == PT_TLS && data != 0 && w->tp > data) {
						w->self_tls_below = w->tp - data;
						w->self_tls_size = t->p_memsz;
					}
					if (t->p_type == PT_LOAD && t->p_memsz != 0) {
						uintptr_t a = info->dlpi_addr + t->p_vaddr;
						self_lo = TFA_MIN(self_lo, a & ~(uintptr_t)4095);
						self_hi = TFA_MAX(self_hi, round_page(a + t->p_memsz));
					}
				}
				w->roots->self_lo = self_lo;
				w->roots->self_hi = self_hi;
				return 0;
			}
		}
	}
	w->roots->modules++;
	for (size_t i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) != 0 && ph->p_memsz != 0) {
			uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
			/*
			 * To the end of the segment's last page: the loader's
			 * start-up allocator (dl-minimal.c) serves its first
			 * blocks from the rest of ld.so's last page, past _end,
			 * and the main program's link_map lies there (its
			 * l_searchlist holds the global scope that a dlopen with
			 * RTLD_GLOBAL mallocs: definitely lost without this).
			 */
			tfa_leak_roots_add(w->roots, w->maps, lo, round_page(lo + ph->p_memsz));
		} else if (ph->p_type == PT_TLS && info->dlpi_tls_data != NULL && ph->p_memsz != 0) {
			uintptr_t lo = (uintptr_t)info->dlpi_tls_data;
			tfa_leak_roots_add(w->roots, w->maps, lo, lo + ph->p_memsz);
		}
	}
	return 0;
}

/*
 * Adds [sp, end of sp's mapping) once sp is in a readable mapping; for
 * another thread (w != NULL), without the excluded module's TLS block of
 * that thread (the shim's: the pointers it freed last, its allocator's
 * caches), found below the thread's control block at the top.
 */
static bool
add_stack(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps, uintptr_t sp,
	  const struct phdr_walk *w)
{
	uintptr_t lo, hi;

	if (!tfa_leak_maps_find(maps, sp, &lo, &hi))
		return false;
	uintptr_t tcb = w != NULL && w->self_tls_size != 0 ? tfa_leak_find_tcb(sp, hi) : 0;
	uintptr_t cut_lo = 0, cut_hi = 0;
	if (tcb != 0 && tcb > w->self_tls_below) {
		cut_lo = tcb - w->self_tls_below;
		cut_hi = cut_lo + w->self_tls_size;
	}
	if (cut_hi != 0 && cut_lo >= sp && cut_hi <= hi) {
		roots_push(roots, sp, cut_lo);
		roots_push(roots, cut_hi, hi);
	} else {
		roots_push(roots, sp, hi);
	}
	return true;
}

/* The stack pointer of thread tid when it is blocked (in a system call or not). */
static bool
thread_sp(pid_t tid, uintptr_t *sp)
{
	char path[64], buf[256];
	int len;

	tfa_snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	len = (int)tfa_read_small_file(path, buf, sizeof(buf));
	if (len < 0)
		return false;
	/* "running"; "-1 SP PC" (blocked, not in a call); "NR A1 .. A6 SP PC". */
	const char *tok[9];
	int ntok = 0;
	for (char *p = buf; *p != '\0' && ntok < 9;) {
		while (*p == ' ' || *p == '\n')
			p++;
		if (*p == '\0')
			break;
		tok[ntok++] = p;
		while (*p != '\0' && *p != ' ' && *p != '\n')
			p++;
	}
	const char *spt = NULL;
	if (ntok == 3 && tok[0][0] == '-')
		spt = tok[1];
	else if (ntok == 9)
		spt = tok[7];
	if (spt == NULL || spt[0] != '0' || spt[1] != 'x')
		return false;
	return parse_hex(spt + 2, spt + strlen(spt), sp) != NULL;
}

/* The other threads' stacks; /proc/self/task listed with getdents64 (opendir allocates). */
static void
add_other_threads(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps, const struct phdr_walk *w)
{
	char buf[4096];
	pid_t self = (pid_t)syscall(SYS_gettid);
	int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool other = false;

	if (fd < 0)
		return;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			off += d->d_reclen;
			if (d->d_name[0] < '0' || d->d_name[0] > '9')
				continue;
			pid_t tid = 0;
			for (const char *c = d->d_name; *c >= '0' && *c <= '9'; c++)
				tid = tid * 10 + (*c - '0');
			if (tid == self)
				continue;
			other = true;
			uintptr_t sp;
			if (thread_sp(tid, &sp) && add_stack(roots, maps, sp, w))
				roots->threads++;
			else
				roots->threads_missed++;
		}
	}
	close(fd);
	roots->alone = !other;
}

/*
 * In a forked child, the parent's other threads are gone but their stacks
 * are still mapped, holding what they held at the fork: a block only a
 * variable of theirs pointed to had been "definitely lost" in every such
 * child, which had not lost it.  Each stack is read whole (where its thread
 * stood is not known), as the anonymous mappings are.  What those threads
 * kept in thread-specific data, glibc clears in the child: the values the
 * fork copied before are read instead (core/thread.h).
 */
static void
add_left_by_fork(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps, const struct phdr_walk *w)
{
	uintptr_t tps[256], lo, hi;
	size_t n = tfa_thread_left_by_fork(tps, TFA_ARRAY_SIZE(tps));

#ifdef TFA_HAVE_MEMCHECK
	/* memcheck holds a dead thread's stack inaccessible. */
	if (RUNNING_ON_VALGRIND)
		return;
#endif
	for (size_t i = 0; i < n && i < TFA_ARRAY_SIZE(tps); i++)
		if (tfa_leak_maps_find(maps, tps[i], &lo, &hi) && add_stack(roots, maps, lo, w))
			roots->left_by_fork++;
	/* What they held in thread-specific data, copied before the fork (glibc cleared it here). */
	const uintptr_t *values;
	size_t nvalues = n != 0 ? tfa_thread_left_by_fork_tsd(&values) : 0;
	if (nvalues != 0) {
		roots_push(roots, (uintptr_t)values, (uintptr_t)(values + nvalues));
		roots->left_by_fork_tsd = (uint32_t)nvalues;
	}
}

__attribute__((no_sanitize("address"))) uintptr_t
tfa_leak_find_tcb(uintptr_t lo, uintptr_t hi)
{
#if defined(__x86_64__)
#	ifdef TFA_HAVE_MEMCHECK
	/* memcheck holds a dead thread's stack inaccessible: reading it would be an error there. */
	if (RUNNING_ON_VALGRIND)
		return 0;
#	endif
	uintptr_t from = hi - lo > 8192 ? hi - 8192 : lo;
	for (uintptr_t a = (from + 63) & ~(uintptr_t)63; a + 3 * sizeof(uintptr_t) <= hi; a += 64) {
		if (*(const volatile tfa_word_t *)a == a
		    && *(const volatile tfa_word_t *)(a + 2 * sizeof(uintptr_t)) == a)
			return a;
	}
#else
	(void)lo;
	(void)hi;
#endif
	return 0;
}

/*
 * glibc's struct pthread, at the thread pointer on x86-64: pthread keys'
 * values (specific_1stblock) and the dtv.  2368 bytes in glibc 2.36
 * (_thread_db_sizeof_pthread); a little more is harmless: the rest of the
 * loader's memory it lies in (or the thread's stack mapping, for another
 * thread).
 */
#define TCB_SCAN_BYTES 4096u

int
tfa_leak_collect_roots(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps, const void *self,
		       uintptr_t stack_lo, const uintptr_t *regs, size_t nregs)
{
	struct phdr_walk w = { .roots = roots, .maps = maps, .self = (uintptr_t)self };

	if (nregs != 0)
		roots_push(roots, (uintptr_t)regs, (uintptr_t)(regs + nregs));
	if (stack_lo != 0 && !add_stack(roots, maps, stack_lo, NULL))
		roots->threads_missed++;
	uintptr_t tp = 0;
#if defined(__x86_64__)
	__asm__("mov %%fs:0, %0" : "=r"(tp));
#endif
	w.tp = tp;
	(void)dl_iterate_phdr(phdr_visit, &w);
	if (w.self_tls_size != 0) {
		roots->self_tls_lo = tp - w.self_tls_below;
		roots->self_tls_hi = roots->self_tls_lo + w.self_tls_size;
	}
	uintptr_t lo, hi;
	if (tp != 0 && tfa_leak_maps_find(maps, tp, &lo, &hi))
		roots_push(roots, tp, TFA_MIN(hi, tp + TCB_SCAN_BYTES));
	add_other_threads(roots, maps, &w);
	add_left_by_fork(roots, maps, &w);
	/* Control blocks of other threads, live or cached (the calling thread's is rooted above). */
	for (size_t i = 0; i < maps->nguarded; i++) {
		uintptr_t a = tfa_leak_find_tcb(maps->guarded[i].lo, maps->guarded[i].hi);
		if (a != 0 && a != tp) {
			roots_push(roots, a, TFA_MIN(maps->guarded[i].hi, a + TCB_SCAN_BYTES));
			roots->tcbs++;
		}
	}
	return roots->n != 0 || roots->cap != 0 ? 0 : -ENOMEM;
}
