/* SPDX-License-Identifier: MIT */
#include "core/arena.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "core/common.h"
#include "core/lock.h"
#include "core/own_maps.h"

#define CHUNK_SIZE ((size_t)64 << 10)

static tfa_lock_t arena_lock = TFA_LOCK_INIT;
static char *chunk_cur;
static size_t chunk_left;
static size_t mapped_bytes;
static long fail_after = -1;

/*
 * Large pieces (the pointer table of a big heap) are aligned to 2 MiB and
 * asked to be backed by transparent huge pages: every allocation and free
 * probes a random line of the table, and with 4 KiB pages each probe would
 * also miss the TLB.  The mapping is trimmed to exactly [p, p + bytes), so
 * tfa_arena_unmap(p, bytes) undoes it.
 */
#define HUGE_PAGE ((size_t)2 << 20)

static void *
map_huge(size_t bytes, bool filled)
{
	size_t span = bytes + HUGE_PAGE;
	tfa_own_maps_arena_begin();
	char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	tfa_own_maps_arena_end();

	if (raw == MAP_FAILED)
		return NULL;
	char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
	if (p > raw)
		munmap(raw, (size_t)(p - raw));
	if (raw + span > p + bytes)
		munmap(p + bytes, (size_t)(raw + span - (p + bytes)));
	madvise(p, bytes, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	if (filled)
		madvise(p, bytes, MADV_POPULATE_WRITE); /* Linux 5.14 on; before, faulted as used */
#else
	(void)filled;
#endif
	__atomic_fetch_add(&mapped_bytes, bytes, __ATOMIC_RELAXED);
	return p;
}

static void *
map_pages(size_t bytes, bool filled)
{
	long budget = __atomic_load_n(&fail_after, __ATOMIC_RELAXED);

	if (tfa_unlikely(budget >= 0)) {
		if (budget == 0)
			return NULL;
		__atomic_fetch_sub(&fail_after, 1, __ATOMIC_RELAXED);
	}
	if (bytes >= HUGE_PAGE)
		return map_huge(bytes, filled);
	tfa_own_maps_arena_begin();
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (filled ? MAP_POPULATE : 0), -1, 0);
	tfa_own_maps_arena_end();
	if (p == MAP_FAILED)
		return NULL;
	__atomic_fetch_add(&mapped_bytes, bytes, __ATOMIC_RELAXED);
	return p;
}

void *
tfa_arena_map(size_t bytes)
{
	return map_pages(bytes, false);
}

void *
tfa_arena_map_filled(size_t bytes)
{
	return map_pages(bytes, true);
}

void *
tfa_arena_reserve(size_t bytes)
{
	long budget = __atomic_load_n(&fail_after, __ATOMIC_RELAXED);

	if (tfa_unlikely(budget >= 0)) {
		if (budget == 0)
			return NULL;
		__atomic_fetch_sub(&fail_after, 1, __ATOMIC_RELAXED);
	}
	tfa_own_maps_arena_begin();
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	tfa_own_maps_arena_end();
	if (p == MAP_FAILED)
		return NULL;
	/* Its pieces are used one by one: a huge page would make 2 MiB of them at once. */
	(void)madvise(p, bytes, MADV_NOHUGEPAGE);
	return p;
}

void
tfa_arena_count(long delta)
{
	__atomic_fetch_add(&mapped_bytes, (size_t)delta, __ATOMIC_RELAXED);
}

void
tfa_arena_unmap(void *p, size_t bytes)
{
	if (p == NULL)
		return;
	munmap(p, bytes);
	__atomic_fetch_sub(&mapped_bytes, bytes, __ATOMIC_RELAXED);
}

void *
tfa_arena_alloc(size_t bytes)
{
	bytes = (bytes + 15) & ~(size_t)15;
	if (bytes > CHUNK_SIZE / 4)
		return tfa_arena_map(bytes);

	tfa_lock(&arena_lock);
	if (chunk_left < bytes) {
		char *c = tfa_arena_map(CHUNK_SIZE);
		if (c == NULL) {
			tfa_unlock(&arena_lock);
			return NULL;
		}
		chunk_cur = c;
		chunk_left = CHUNK_SIZE;
	}
	void *p = chunk_cur;
	chunk_cur += bytes;
	chunk_left -= bytes;
	tfa_unlock(&arena_lock);
	return p;
}

char *
tfa_arena_strndup(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	char *p = tfa_arena_alloc(n + 1);

	if (p != NULL) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

size_t
tfa_arena_mapped_bytes(void)
{
	return __atomic_load_n(&mapped_bytes, __ATOMIC_RELAXED);
}

void
tfa_arena_inject_failure(long successes)
{
	__atomic_store_n(&fail_after, successes, __ATOMIC_RELAXED);
}

void
tfa_arena_prefork(void)
{
	tfa_lock(&arena_lock);
}

void
tfa_arena_postfork_parent(void)
{
	tfa_unlock(&arena_lock);
}

void
tfa_arena_postfork_child(void)
{
	tfa_lock_init(&arena_lock);
}
