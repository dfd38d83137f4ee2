/* SPDX-License-Identifier: MIT */
#include "core/sites.h"

#include "core/arena.h"

tfa_site_t *
tfa_sites_get_slow(tfa_sites_t *t, uint32_t stack_id)
{
	uint32_t k = stack_id >> TFA_SITES_CHUNK_LG;

	if (k >= TFA_SITES_CHUNKS)
		return NULL;
	tfa_site_t *c = __atomic_load_n(&t->chunks[k], __ATOMIC_ACQUIRE);
	if (c == NULL) {
		tfa_site_t *fresh = tfa_arena_map(sizeof(tfa_site_t) * TFA_SITES_CHUNK);
		if (fresh == NULL)
			return NULL;
		/* Sites of a new chunk belong to the current snapshot: they held nothing at it. */
		uint64_t e = __atomic_load_n(&t->epoch, __ATOMIC_ACQUIRE);
		for (uint32_t i = 0; i < TFA_SITES_CHUNK; i++)
			fresh[i].epoch = e;
		if (__atomic_compare_exchange_n(&t->chunks[k], &c, fresh, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			c = fresh;
		} else {
			tfa_arena_unmap(fresh, sizeof(tfa_site_t) * TFA_SITES_CHUNK);
		}
	}
	return &c[stack_id & (TFA_SITES_CHUNK - 1)];
}

/* Moves d's figures to their site.  REQUIRES: d is the calling thread's, d->stack_id != 0. */
static void
cache_move(tfa_sites_t *t, tfa_site_delta_t *d)
{
	tfa_site_t *s = tfa_sites_get(t, d->stack_id); /* mapped when d took the site */

	if (s != NULL) {
		tfa_site_catch_up(t, s);
		__atomic_fetch_add(&s->allocs, d->allocs, __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->total_bytes, d->total_bytes, __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->in_use_bytes, d->in_use_bytes, __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->in_use_blocks, d->in_use_blocks, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&d->allocs, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&d->total_bytes, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&d->in_use_bytes, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&d->in_use_blocks, 0, __ATOMIC_RELAXED);
}

/* Readers that see seq odd wait, or leave the entry out (a mover below them on their own thread). */
static void
seq_begin(tfa_site_delta_t *d)
{
	/* Acquire: the figures' stores below stay after the odd count (a move is rare). */
	__atomic_fetch_add(&d->seq, 1, __ATOMIC_ACQ_REL);
}

static void
seq_end(tfa_site_delta_t *d)
{
	__atomic_store_n(&d->seq, d->seq + 1, __ATOMIC_RELEASE);
}

bool
tfa_sites_cache_switch(tfa_sites_t *t, tfa_site_delta_t *d, uint32_t stack_id)
{
	if (tfa_sites_get(t, stack_id) == NULL)
		return false;
	seq_begin(d);
	if (d->stack_id != 0)
		cache_move(t, d);
	__atomic_store_n(&d->stack_id, stack_id, __ATOMIC_RELAXED);
	seq_end(d);
	return true;
}

void
tfa_sites_cache_flush(tfa_sites_t *t, tfa_site_delta_t *d)
{
	seq_begin(d);
	cache_move(t, d);
	seq_end(d);
}

void
tfa_sites_snapshot(tfa_sites_t *t, int64_t in_use)
{
	__atomic_store_n(&t->snapshot_bytes, in_use, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t->epoch, 1, __ATOMIC_ACQ_REL);
}

/* ---- the figures in threads' caches, for readers --------------------------------------------- */

struct pending {
	tfa_site_delta_t *v; /* stack_id and the sums of every thread's entries for it */
	uint64_t n, cap;
};

static void
pending_take(void *arg, tfa_thread_rec_t *r)
{
	struct pending *p = arg;

	for (unsigned i = 0; i < TFA_SITE_CACHE && p->n < p->cap; i++) {
		tfa_site_delta_t *d = &r->site_cache[i], copy;
		bool whole = false;
		for (int tries = 0; tries < 1000 && !whole; tries++) {
			uint32_t seq = __atomic_load_n(&d->seq, __ATOMIC_ACQUIRE);
			if (seq & 1)
				continue;
			/* Acquire loads: the second look at seq stays after them. */
			copy.stack_id = __atomic_load_n(&d->stack_id, __ATOMIC_ACQUIRE);
			copy.allocs = __atomic_load_n(&d->allocs, __ATOMIC_ACQUIRE);
			copy.total_bytes = __atomic_load_n(&d->total_bytes, __ATOMIC_ACQUIRE);
			copy.in_use_bytes = __atomic_load_n(&d->in_use_bytes, __ATOMIC_ACQUIRE);
			copy.in_use_blocks = __atomic_load_n(&d->in_use_blocks, __ATOMIC_ACQUIRE);
			whole = __atomic_load_n(&d->seq, __ATOMIC_RELAXED) == seq;
		}
		if (whole && copy.stack_id != 0
		    && (copy.allocs | copy.total_bytes | (uint64_t)copy.in_use_bytes | (uint64_t)copy.in_use_blocks) != 0)
			p->v[p->n++] = copy;
	}
}

/* Shell sort by stack id (qsort may malloc). */
static void
pending_sort(tfa_site_delta_t *v, uint64_t n)
{
	static const uint64_t gaps[] = { 701, 301, 132, 57, 23, 10, 4, 1 };

	for (unsigned g = 0; g < sizeof(gaps) / sizeof(gaps[0]); g++) {
		for (uint64_t i = gaps[g]; i < n; i++) {
			tfa_site_delta_t x = v[i];
			uint64_t j = i;
			for (; j >= gaps[g] && v[j - gaps[g]].stack_id > x.stack_id; j -= gaps[g])
				v[j] = v[j - gaps[g]];
			v[j] = x;
		}
	}
}

static void
count_visit(void *arg, tfa_thread_rec_t *r)
{
	(void)r;
	(*(uint64_t *)arg)++;
}

static void
pending_collect(struct pending *p)
{
	uint64_t recs = 0;

	tfa_thread_foreach(count_visit, &recs);
	p->cap = recs * TFA_SITE_CACHE;
	p->n = 0;
	p->v = p->cap != 0 ? tfa_arena_map(p->cap * sizeof(tfa_site_delta_t)) : NULL;
	if (p->v == NULL) {
		p->cap = 0;
		return;
	}
	tfa_thread_foreach(pending_take, p);
	pending_sort(p->v, p->n);
}

/* Adds the pending figures of stack_id to s; *at walks p in stack id order. */
static void
pending_add(const struct pending *p, uint64_t *at, uint32_t stack_id, tfa_site_t *s)
{
	while (*at < p->n && p->v[*at].stack_id < stack_id)
		(*at)++;
	for (; *at < p->n && p->v[*at].stack_id == stack_id; (*at)++) {
		s->allocs += p->v[*at].allocs;
		s->total_bytes += p->v[*at].total_bytes;
		s->in_use_bytes += p->v[*at].in_use_bytes;
		s->in_use_blocks += p->v[*at].in_use_blocks;
	}
}

void
tfa_sites_foreach(tfa_sites_t *t, int64_t peak, int64_t in_use,
		  void (*fn)(void *arg, uint32_t stack_id, const tfa_site_t *site), void *arg)
{
	uint64_t e = __atomic_load_n(&t->epoch, __ATOMIC_ACQUIRE);
	/* At the peak now, or never left it since the last snapshot. */
	bool peak_is_now = in_use >= peak || e == 0;
	struct pending p = { 0 };
	uint64_t at = 0;

	if (t->thread_cached)
		pending_collect(&p);

	for (uint32_t k = 0; k < TFA_SITES_CHUNKS; k++) {
		tfa_site_t *c = __atomic_load_n(&t->chunks[k], __ATOMIC_ACQUIRE);
		if (c == NULL)
			continue;
		for (uint32_t i = 0; i < TFA_SITES_CHUNK; i++) {
			tfa_site_t s = c[i];
			uint32_t stack_id = (k << TFA_SITES_CHUNK_LG) | i;
			if (p.n != 0)
				pending_add(&p, &at, stack_id, &s);
			if (s.allocs == 0)
				continue;
			if (peak_is_now || s.epoch != e)
				s.peak_bytes = s.in_use_bytes;
			fn(arg, stack_id, &s);
		}
	}
	if (p.v != NULL)
		tfa_arena_unmap(p.v, p.cap * sizeof(tfa_site_delta_t));
}

uint64_t
tfa_sites_bytes(const tfa_sites_t *t)
{
	uint64_t n = 0;

	for (uint32_t k = 0; k < TFA_SITES_CHUNKS; k++)
		if (__atomic_load_n(&t->chunks[k], __ATOMIC_RELAXED) != NULL)
			n += sizeof(tfa_site_t) * TFA_SITES_CHUNK;
	return n;
}
