/* SPDX-License-Identifier: MIT */
#include "core/thread.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/arena.h"

TFA_TLS tfa_tls_t tfa_tls;
tfa_thread_rec_t tfa_orphan_rec;
tfa_lock_t tfa_orphan_lock = TFA_LOCK_INIT;

struct slot_owner {
	tfa_slot_flush_fn flush;
	void *ctx;
};

static tfa_lock_t threads_lock = TFA_LOCK_INIT; /* free list, slots */
static tfa_thread_rec_t *all_recs;
static tfa_thread_rec_t *free_recs;
static uint32_t next_index;
static uint32_t live_count;
static struct slot_owner slot_owners[TFA_MAX_STAT_SLOTS];

static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static bool exit_key_ok;

static void thread_exit_hook(void *arg);

/*
 * An alternate signal stack for each registered thread that has none of its
 * own: a stack overflow's SIGSEGV has no stack left to run a handler on, so
 * the kernel killed the process without the shim's handler, and the profile
 * was lost (a recursion without end).  64 KiB: writing a profile from the
 * handler took between 8 and 16 KiB.  Mapped apart from the shim's arena, so
 * not counted in its overhead (address space, nearly all of it never
 * touched); the wrapped mmap still records it as the shim's own, which the
 * leak scan leaves out.
 */
bool tfa_thread_altstack_on;
#define ALTSTACK_BYTES ((size_t)64 << 10)

void *
tfa_thread_map_stack(size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
		       -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	/* A guard page: a handler that outgrows the stack faults instead of writing below it. */
	(void)mprotect(m, page, PROT_NONE);
	return m + page;
}

static void
altstack_take(tfa_thread_rec_t *r)
{
	stack_t cur, ss;
	int saved_errno = errno;

	if (!__atomic_load_n(&tfa_thread_altstack_on, __ATOMIC_RELAXED) || sigaltstack(NULL, &cur) != 0
	    || (cur.ss_flags & SS_DISABLE) == 0)
		goto out;
	if (r->altstack == NULL && (r->altstack = tfa_thread_map_stack(ALTSTACK_BYTES)) == NULL)
		goto out;
	ss.ss_sp = r->altstack;
	ss.ss_size = ALTSTACK_BYTES;
	ss.ss_flags = 0;
	(void)sigaltstack(&ss, NULL);
out:
	errno = saved_errno;
}

/* The thread ends: its record (and the stack) may go to another thread, so this one stops using it. */
static void
altstack_leave(tfa_thread_rec_t *r)
{
	stack_t cur, off = { .ss_flags = SS_DISABLE };
	int saved_errno = errno;

	if (r->altstack != NULL && sigaltstack(NULL, &cur) == 0 && cur.ss_sp == r->altstack) {
		/* On it now (a handler's thread exits): it stays this thread's. */
		if ((cur.ss_flags & SS_ONSTACK) != 0 || sigaltstack(&off, NULL) != 0)
			r->altstack = NULL;
	}
	errno = saved_errno;
}

void
tfa_thread_altstack_self(void)
{
	if (tfa_tls.state == TFA_TLS_REGISTERED)
		altstack_take(tfa_tls.rec);
}

static void
exit_key_create(void)
{
	exit_key_ok = pthread_key_create(&exit_key, thread_exit_hook) == 0;
}

tfa_thread_rec_t *
tfa_thread_register_slow(void)
{
	if (tfa_tls.state == TFA_TLS_RETIRED)
		return &tfa_orphan_rec;

	tfa_thread_rec_t *r;

	tfa_lock(&threads_lock);
	r = free_recs;
	if (r != NULL)
		free_recs = r->next_free;
	uint32_t index = ++next_index & 0xffffff;
	live_count++;
	tfa_unlock(&threads_lock);

	if (r == NULL) {
		r = tfa_arena_alloc(sizeof(*r));
		if (r == NULL) {
			tfa_lock(&threads_lock);
			live_count--;
			tfa_unlock(&threads_lock);
			return &tfa_orphan_rec;
		}
		/* Publish with a CAS push: readers walk the list without the lock. */
		tfa_thread_rec_t *head = __atomic_load_n(&all_recs, __ATOMIC_RELAXED);
		do {
			r->next_all = head;
		} while (!__atomic_compare_exchange_n(&all_recs, &head, r, true, __ATOMIC_RELEASE,
						      __ATOMIC_RELAXED));
	}
	r->index = index;
	r->id_thread_bits = (uint64_t)(index & 0xffffff) << 40;
	r->live = 1;
	r->thread_pointer = (uintptr_t)pthread_self();
	r->left_by_fork = false;
	r->next_free = NULL;
	tfa_tls.rec = r;
	tfa_tls.errno_loc = __errno_location();
	tfa_tls.fast_rec = r;
	tfa_tls.state = TFA_TLS_REGISTERED;

	/*
	 * The exit hook recycles the record.  pthread_setspecific allocates for
	 * keys past the first 32, so it runs under the guard.
	 */
	tfa_guard_enter();
	pthread_once(&exit_key_once, exit_key_create);
	if (exit_key_ok)
		pthread_setspecific(exit_key, r);
	tfa_guard_exit();
	altstack_take(r);
	return r;
}

static void
thread_exit_hook(void *arg)
{
	tfa_thread_rec_t *r = arg;

	if (r == NULL || r != tfa_tls.rec)
		return;
	altstack_leave(r);
	tfa_lock(&threads_lock);
	for (int s = 0; s < TFA_MAX_STAT_SLOTS; s++) {
		if (slot_owners[s].flush != NULL)
			slot_owners[s].flush(slot_owners[s].ctx, &r->slots[s]);
		/* Unused ids of the block are dropped: ids stay unique. */
		r->slots[s].next_id = r->slots[s].id_end = 0;
	}
	r->live = 0;
	r->next_free = free_recs;
	free_recs = r;
	live_count--;
	tfa_unlock(&threads_lock);
	tfa_tls.fast_rec = NULL;
	tfa_tls.rec = &tfa_orphan_rec;
	tfa_tls.state = TFA_TLS_RETIRED;
}

int
tfa_thread_slot_acquire(tfa_slot_flush_fn flush, void *ctx)
{
	int found = -ENOSPC;

	tfa_lock(&threads_lock);
	for (int s = TFA_SLOT_PROCESS + 1; s < TFA_MAX_STAT_SLOTS; s++) {
		if (slot_owners[s].flush == NULL) {
			slot_owners[s].flush = flush;
			slot_owners[s].ctx = ctx;
			found = s;
			break;
		}
	}
	tfa_unlock(&threads_lock);
	return found;
}

void
tfa_thread_slot_set_process_flush(tfa_slot_flush_fn flush, void *ctx)
{
	tfa_lock(&threads_lock);
	slot_owners[TFA_SLOT_PROCESS].flush = flush;
	slot_owners[TFA_SLOT_PROCESS].ctx = ctx;
	tfa_unlock(&threads_lock);
}

void
tfa_thread_slot_release(int slot)
{
	if (slot <= TFA_SLOT_PROCESS || slot >= TFA_MAX_STAT_SLOTS)
		return;
	tfa_lock(&threads_lock);
	for (tfa_thread_rec_t *r = __atomic_load_n(&all_recs, __ATOMIC_ACQUIRE); r != NULL;
	     r = r->next_all)
		memset(&r->slots[slot], 0, sizeof(r->slots[slot]));
	memset(&tfa_orphan_rec.slots[slot], 0, sizeof(tfa_orphan_rec.slots[slot]));
	slot_owners[slot].flush = NULL;
	slot_owners[slot].ctx = NULL;
	tfa_unlock(&threads_lock);
}

void
tfa_thread_foreach(void (*fn)(void *arg, tfa_thread_rec_t *rec), void *arg)
{
	for (tfa_thread_rec_t *r = __atomic_load_n(&all_recs, __ATOMIC_ACQUIRE); r != NULL;
	     r = r->next_all)
		fn(arg, r);
	fn(arg, &tfa_orphan_rec);
}

uint32_t
tfa_thread_live_count(void)
{
	return __atomic_load_n(&live_count, __ATOMIC_RELAXED);
}

/*
 * What the other threads held in thread-specific data (pthread_setspecific)
 * when the process forked.  glibc clears it in the child (its
 * __reclaim_stacks), so a block only a key of theirs held looked
 * definitely lost in every child: GLib's suite under the leak gate failed
 * 18 forked children on their parent's threads' GSlice magazines.  The
 * values are copied before the fork, and the child's leak scan reads the
 * copy as it reads the stacks those threads left (tfa_thread_left_by_fork).
 * Where the values lie in a thread's descriptor, glibc says through the
 * symbols it exports for libthread_db: the offset and size of the array of
 * second-level blocks in struct pthread (the first is inside it), and the
 * size of a block's entries and of the value's place in one.
 */
static struct {
	uint32_t specific_off; /* struct pthread's specific[] */
	uint32_t nspecific;    /* its pointers */
	uint32_t entry_size;   /* a struct pthread_key_data */
	uint32_t nentries;     /* of them in a second-level block */
	uint32_t data_off;     /* the value in one */
	bool ok;
} tsd;

/* The copy, mapped at the first fork with other threads: FORK_TSD_WORDS values at most. */
#define FORK_TSD_WORDS 8192
static uintptr_t *fork_tsd;
static size_t fork_tsd_n;

/* A libthread_db descriptor: the field's size in bits, its count, its offset. */
static bool
db_desc(const char *name, uint32_t out[3])
{
	const uint32_t *d = dlsym(RTLD_DEFAULT, name);

	if (d == NULL)
		return false;
	memcpy(out, d, 3 * sizeof(uint32_t));
	return true;
}

void
tfa_thread_tsd_layout_init(void)
{
	uint32_t spec[3], level2[3], data[3];

	if (!db_desc("_thread_db_pthread_specific", spec) || !db_desc("_thread_db_pthread_key_data_level2_data", level2)
	    || !db_desc("_thread_db_pthread_key_data_data", data))
		return;
	uint64_t spec_bytes = (uint64_t)spec[0] / 8 * (spec[1] != 0 ? spec[1] : 1);
	uint32_t entry = level2[0] / 8;
	/* What glibc 2.26 to 2.40 have on 64-bit targets; anything else is not read. */
	if (spec_bytes == 0 || spec_bytes % sizeof(void *) != 0 || spec_bytes > 1024 || entry < 2 * sizeof(void *)
	    || entry > 64 || level2[1] == 0 || level2[1] > 1024 || data[0] != 8 * sizeof(void *)
	    || data[2] + sizeof(void *) > entry || level2[2] != 0)
		return;
	tsd.specific_off = spec[2];
	tsd.nspecific = (uint32_t)(spec_bytes / sizeof(void *));
	tsd.entry_size = entry;
	tsd.nentries = level2[1];
	tsd.data_off = data[2];
	tsd.ok = true;
}

/* Reads n bytes at addr of this process without faulting: false when any of them is not mapped. */
static bool
read_self(void *dst, uintptr_t addr, size_t n)
{
	struct iovec local = { .iov_base = dst, .iov_len = n };
	struct iovec remote = { .iov_base = (void *)addr, .iov_len = n };

	return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n;
}

/* The other registered threads' values, into fork_tsd.  REQUIRES: threads_lock.  Keeps errno. */
static void
copy_other_threads_tsd(void)
{
	int saved_errno = errno;

	/*
	 * Alone: what an earlier fork copied stays, for a child of this child
	 * (the threads left by that fork are left by this one too).
	 */
	if (!tsd.ok || live_count < 2)
		goto out;
	fork_tsd_n = 0;
	if (fork_tsd == NULL && (fork_tsd = tfa_arena_map(FORK_TSD_WORDS * sizeof(uintptr_t))) == NULL)
		goto out;
	for (tfa_thread_rec_t *r = all_recs; r != NULL; r = r->next_all) {
		if (!r->live || r == tfa_tls.rec || r->thread_pointer == 0)
			continue;
		uintptr_t blocks[128];
		size_t nblocks = tsd.nspecific < 128 ? tsd.nspecific : 128;
		if (!read_self(blocks, r->thread_pointer + tsd.specific_off, nblocks * sizeof(uintptr_t)))
			continue;
		for (size_t b = 0; b < nblocks; b++) {
			unsigned char entries[2048];
			size_t bytes = (size_t)tsd.entry_size * tsd.nentries;
			if (blocks[b] == 0 || bytes > sizeof(entries) || !read_self(entries, blocks[b], bytes))
				continue;
			for (size_t e = 0; e < tsd.nentries && fork_tsd_n < FORK_TSD_WORDS; e++) {
				uintptr_t v;
				memcpy(&v, entries + e * tsd.entry_size + tsd.data_off, sizeof(v));
				if (v != 0)
					fork_tsd[fork_tsd_n++] = v;
			}
		}
	}
out:
	errno = saved_errno;
}

size_t
tfa_thread_left_by_fork_tsd(const uintptr_t **values)
{
	*values = fork_tsd;
	return fork_tsd != NULL ? fork_tsd_n : 0;
}

void
tfa_thread_prefork(void)
{
	tfa_lock(&threads_lock);
	tfa_lock(&tfa_orphan_lock);
	copy_other_threads_tsd();
}

void
tfa_thread_postfork_parent(void)
{
	tfa_unlock(&tfa_orphan_lock);
	tfa_unlock(&threads_lock);
}

void
tfa_thread_postfork_child(void)
{
	tfa_lock_init(&tfa_orphan_lock);
	tfa_lock_init(&threads_lock);
	/*
	 * Only the forking thread exists in the child.  The other records keep
	 * their counts (the child inherited what those threads allocated) but
	 * are never live again.
	 */
	live_count = 1;
	for (tfa_thread_rec_t *r = all_recs; r != NULL; r = r->next_all)
		if (r->live && r != tfa_tls.rec)
			r->left_by_fork = true;
}

size_t
tfa_thread_left_by_fork(uintptr_t *tps, size_t max)
{
	size_t n = 0;

	for (tfa_thread_rec_t *r = __atomic_load_n(&all_recs, __ATOMIC_ACQUIRE); r != NULL; r = r->next_all) {
		if (!r->left_by_fork || r->thread_pointer == 0)
			continue;
		if (n < max)
			tps[n] = r->thread_pointer;
		n++;
	}
	return n;
}
