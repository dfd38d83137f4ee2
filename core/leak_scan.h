/* SPDX-License-Identifier: MIT */
/*
 * Leak classes as valgrind's memcheck defines them: which live blocks the
 * program can still reach at exit.
 *
 * Glossary:
 *   root       memory that is not a heap block and that the program reads
 *              pointers from: writable segments of loaded modules (data,
 *              bss), thread stacks above their stack pointer, static TLS,
 *              saved registers.
 *   start pointer     an aligned 8-byte word holding the first address of a
 *              live block (for a block of 0 bytes, the only address it has).
 *   interior pointer  a word holding an address inside a block, past its start.
 *   reachable  a chain of start pointers leads from a root to the block.
 *   possible   the block is reached, but some link of every chain to it is an
 *              interior pointer ("possibly lost").
 *   definite   not reached from the roots, and no other unreached block
 *              points to it ("definitely lost"): the head of a lost structure.
 *   indirect   not reached from the roots, but pointed to (start or interior)
 *              from another unreached block ("indirectly lost").
 *
 * The algorithm is memcheck's (mc_leakcheck.c): mark from the roots with a
 * worklist, upgrading Unreached -> Possible -> Reachable (a block is scanned
 * again when its state rises, so each is scanned at most twice); then, in
 * address order, each block still unreached and not yet claimed by another
 * clique leads a clique: every unreached block it reaches (through any
 * pointer) becomes indirect.  A lost cycle thus has one definite block (the
 * first in address order) and the rest indirect; a self-referencing lost
 * block is definite.
 *
 * Cost: O(n log n) to sort n blocks, then O(scanned words x log n): every
 * root word and every word of a reached block (each block at most three
 * times: Possible, Reachable, clique) is looked up by binary search.  Memory:
 * the caller's n blocks (24 bytes each) and a worklist of 2n 32-bit entries;
 * no allocation here, no recursion, no malloc (the shim runs this at exit).
 */
#ifndef TFA_CORE_LEAK_SCAN_H
#define TFA_CORE_LEAK_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Classes; the values are the profile's (enum tfa_prof_leak_kind_e). */
enum tfa_leak_class_e {
	TFA_LEAK_CLASS_UNREACHED = 0, /* during the scan only */
	TFA_LEAK_CLASS_DEFINITE = 1,
	TFA_LEAK_CLASS_INDIRECT = 2,
	TFA_LEAK_CLASS_POSSIBLE = 3,
	TFA_LEAK_CLASS_REACHABLE = 4,
};

/* Block flags (in). */
#define TFA_LEAK_NOSCAN 1u /* its memory is not readable: it is a node, never scanned */

typedef struct tfa_leak_block_s {
	uintptr_t addr;
	uint64_t size;  /* requested bytes: scanned, and what an interior pointer hits */
	uint32_t user;  /* the caller's: which record this block is */
	uint8_t flags;  /* TFA_LEAK_NOSCAN */
	uint8_t cls;    /* out: enum tfa_leak_class_e */
	uint16_t pad;
} tfa_leak_block_t;

typedef struct tfa_leak_range_s {
	uintptr_t lo, hi; /* [lo, hi) */
} tfa_leak_range_t;

/* Sorts blocks by address: introsort, in place, no allocation. */
void tfa_leak_sort(tfa_leak_block_t *b, size_t n);
/* The same with quicksort's depth given: at 0, heap sort alone (for tests). */
void tfa_leak_sort_limited(tfa_leak_block_t *b, size_t n, unsigned depth);

/*
 * The block (of n, sorted by address) that holds addr: its index, or -1.
 * *start is set to whether addr is the block's first address.  A block of 0
 * bytes holds only its first address.
 */
long tfa_leak_find(const tfa_leak_block_t *b, size_t n, uintptr_t addr, bool *start);

/*
 * An index of n blocks sorted by address, for tfa_leak_index_find: the span
 * [min, max) of the blocks cut into n/2 to n buckets of 2^shift bytes, and
 * for each bucket the first block that starts in it or after it.  A lookup
 * then searches the few blocks of one bucket, where tfa_leak_find searches
 * all n (18 dependent loads for 200,000 blocks, most of them cache misses:
 * on g++ the scan's lookups were 5.5% of the whole run).
 *
 * Before the buckets, a bit per 2^page_shift bytes of the span (a page, or
 * more where that would pass 64 bits a block) says whether any block covers
 * them: most words in the span that point at no block (cc1plus: 2.0 million
 * of the 7.5 million words its roots hold lie in the span, 93,000 in a block,
 * the rest in its garbage collector's pages between jemalloc's) are
 * answered from a table of a few KiB, without the bucket's blocks.
 */
typedef struct tfa_leak_index_s {
	const tfa_leak_block_t *b;
	size_t n;
	uintptr_t min;
	unsigned shift;
	size_t nbuckets;
	uint32_t *first; /* nbuckets + 1 entries (arena memory); NULL: no index, search all */
	size_t bytes;    /* mapped for first */
	unsigned page_shift;
	uint64_t *pages; /* the bits (arena memory); NULL: none, every lookup searches */
	size_t page_bytes;
} tfa_leak_index_t;

/*
 * Builds the index of b[0, n) (sorted, every block in [min, max)).  Without
 * memory for it (or with more blocks than 32 bits count), first stays NULL
 * and lookups search all the blocks.
 */
void tfa_leak_index_build(tfa_leak_index_t *x, const tfa_leak_block_t *b, size_t n, uintptr_t min,
			  uintptr_t max);
void tfa_leak_index_free(tfa_leak_index_t *x);

/* tfa_leak_find through the index, for addr in [min, max). */
long tfa_leak_index_find(const tfa_leak_index_t *x, uintptr_t addr, bool *start);

/*
 * Classifies n blocks sorted by address (cls of each set) from the roots.
 * work: room for 2 * n uint32_t.  The roots and every block without
 * TFA_LEAK_NOSCAN must be readable memory.  Counts per class may be NULL.
 * Returns the bytes it read (roots and blocks).  alone: no other thread runs,
 * so nothing read can be unmapped meanwhile and memory is read in place;
 * otherwise roots and large blocks are copied through process_vm_readv,
 * which says EFAULT of a page that is gone (about 2 us a page: 0.4 ms of
 * every short process's exit, 150 ms for 256 MB of .bss).
 */
uint64_t tfa_leak_classify(tfa_leak_block_t *b, size_t n, const tfa_leak_range_t *roots,
		       size_t nroots, uint32_t *work, bool alone);

/* ---- roots of the running process ---------------------------------------------------------- */

/*
 * Readable mappings of the process (from /proc/self/maps, read with read(2)
 * into arena memory), sorted by address.  n == 0 when it could not be read.
 */
typedef struct tfa_leak_maps_s {
	tfa_leak_range_t *r;   /* readable mappings, in address order */
	size_t n;
	size_t bytes;          /* mapped for r */
	/*
	 * Anonymous read-write mappings right above an inaccessible one: the
	 * shape of a thread stack glibc made (its guard page below).  Threads
	 * that exited keep theirs in glibc's stack cache, control block and
	 * all.
	 */
	tfa_leak_range_t *guarded;
	size_t nguarded;
	/* The other readable private anonymous mappings without a name (not [heap], [stack]). */
	tfa_leak_range_t *anon;
	size_t nanon;
	char *text;            /* the file as read, kept mapped while the list is used */
	size_t text_bytes;
} tfa_leak_maps_t;

int tfa_leak_maps_read(tfa_leak_maps_t *m);

/*
 * Keeps a descriptor to /proc/self/maps (far above the program's, close-on-
 * exec), read again from its start where the path cannot be opened: after a
 * chroot into a directory without /proc, the scan still knows its roots (its
 * leaks were all unclassified, and counted as definite).  Taken before the
 * process confines itself (core/shim.h, tfa_shim_before_credentials);
 * tfa_leak_drop_maps in a fork child, whose maps that file does not show.
 */
void tfa_leak_keep_maps(void);
void tfa_leak_drop_maps(void);
void tfa_leak_maps_free(tfa_leak_maps_t *m);
/* Whether [lo, hi) lies in readable mappings (contiguous ones may share it). */
bool tfa_leak_maps_readable(const tfa_leak_maps_t *m, uintptr_t lo, uintptr_t hi);
/* The readable mapping holding addr (its end in *hi), or false. */
bool tfa_leak_maps_find(const tfa_leak_maps_t *m, uintptr_t addr, uintptr_t *lo, uintptr_t *hi);

/*
 * The glibc thread control block (struct pthread) in the top 8 KiB of a
 * guarded mapping, found by its signature (x86-64: its first word and its
 * third point to itself); 0 when none.
 */
uintptr_t tfa_leak_find_tcb(uintptr_t lo, uintptr_t hi);

/* A growable list of root ranges in arena memory (declared below). */
struct tfa_leak_roots_s;

/*
 * Adds as roots the anonymous mappings (maps->anon, and the guarded ones
 * without a thread control block) the program made itself, as memcheck
 * scans them (an allocator of the program's own on mmap, as pymalloc's
 * arenas; the loader's own memory, where the link_maps are; a JIT's code):
 * each mapping without the ranges of own[0..nown) (sorted by address: the
 * shim's mappings), without the excluded module's range (roots->self_lo,
 * self_hi: the shim's .bss), without what roots holds already (a module's
 * .bss past its file; added again when no memory can be had for the list of
 * ranges to leave out) and without the pieces that hold a live block of
 * b[0..n) (sorted: heap memory of an allocator).  Returns the bytes added.
 */
uint64_t tfa_leak_roots_add_anon(struct tfa_leak_roots_s *roots, const tfa_leak_maps_t *maps,
				 const tfa_leak_range_t *own, size_t nown, const tfa_leak_block_t *b,
				 size_t n);

typedef struct tfa_leak_roots_s {
	tfa_leak_range_t *r;
	size_t n, cap;
	size_t bytes;
	/* What the collection covered, for the summary and the tests. */
	uint32_t modules;         /* modules whose segments were roots */
	uint32_t threads;         /* other threads whose stacks were scanned from their sp */
	uint32_t threads_missed;  /* other threads running (no sp known): only their TCB covered */
	uint32_t tcbs;            /* thread control blocks found in guarded mappings */
	uint32_t left_by_fork;    /* stacks of the threads a fork left in the parent, read whole */
	uint32_t left_by_fork_tsd; /* their thread-specific values, copied before the fork */
	/*
	 * /proc/self/task listed the calling thread alone: no other thread can
	 * unmap memory while the scan reads it (tfa_leak_classify's `alone`).
	 */
	bool alone;
	/*
	 * The address range of the module tfa_leak_collect_roots excluded (all of
	 * its PT_LOAD segments, page-rounded; 0, 0: none): the loader maps the
	 * part of its .bss past the file's last page as an anonymous mapping,
	 * which tfa_leak_roots_add_anon must leave out too.
	 */
	uintptr_t self_lo, self_hi;
	/*
	 * The excluded module's static TLS block of the calling thread (0, 0:
	 * none).  It lies in memory the loader mapped for the thread's static
	 * TLS, an anonymous mapping that tfa_leak_roots_add_anon must cut it
	 * out of: the shim's block there holds the addresses it freed last,
	 * which a later block at the same address would be reachable through.
	 */
	uintptr_t self_tls_lo, self_tls_hi;
} tfa_leak_roots_t;

/* Adds [lo, hi) as clipped to the readable mappings (all of it when maps is empty). */
void tfa_leak_roots_add(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps, uintptr_t lo,
			uintptr_t hi);
void tfa_leak_roots_free(tfa_leak_roots_t *roots);

/*
 * Collects the roots of the calling process, as memcheck scans them and as
 * far as can be done from inside it without ptrace:
 *   - every writable PT_LOAD segment of every loaded module (dl_iterate_phdr),
 *     except the module that holds the address `self` (the shim: its tables
 *     and its private allocator's metadata are not the program's; NULL: none);
 *   - the calling thread's static TLS of each module (dlpi_tls_data, PT_TLS
 *     memsz) and its thread control block (glibc's struct pthread: pthread
 *     keys' values);
 *   - the calling thread's stack from stack_lo (the caller's stack pointer)
 *     to the end of its mapping, and regs[0..nregs) (its callee-saved
 *     registers, copied by the caller);
 *   - every other thread's stack from its stack pointer to the end of the
 *     mapping, as /proc/self/task/TID/syscall gives it for a thread blocked
 *     in a system call (which is where other threads usually are at exit).
 *     A thread's static TLS and control block lie at the top of that mapping
 *     for threads glibc made;
 *   - the control block of every other glibc thread stack (guarded mappings
 *     whose top holds a TCB): a running thread's, and those of exited threads
 *     in glibc's stack cache (their DTV is still allocated).
 *   Not covered: the registers of other threads, and the stacks of threads
 *   that are running (counted in threads_missed).
 * Never allocates through malloc.  Returns 0 or -ENOMEM.
 */
int tfa_leak_collect_roots(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps,
			   const void *self, uintptr_t stack_lo, const uintptr_t *regs,
			   size_t nregs);

#endif /* TFA_CORE_LEAK_SCAN_H */
