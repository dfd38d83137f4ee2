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

void
tfa_sites_snapshot(tfa_sites_t *t, int64_t in_use)
{
	__atomic_store_n(&t->snapshot_bytes, in_use, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t->epoch, 1, __ATOMIC_ACQ_REL);
}

void
tfa_sites_foreach(tfa_sites_t *t, int64_t peak, int64_t in_use,
		  void (*fn)(void *arg, uint32_t stack_id, const tfa_site_t *site), void *arg)
{
	uint64_t e = __atomic_load_n(&t->epoch, __ATOMIC_ACQUIRE);
	/* At the peak now, or never left it since the last snapshot. */
	bool peak_is_now = in_use >= peak || e == 0;

	for (uint32_t k = 0; k < TFA_SITES_CHUNKS; k++) {
		tfa_site_t *c = __atomic_load_n(&t->chunks[k], __ATOMIC_ACQUIRE);
		if (c == NULL)
			continue;
		for (uint32_t i = 0; i < TFA_SITES_CHUNK; i++) {
			tfa_site_t s = c[i];
			if (s.allocs == 0)
				continue;
			if (peak_is_now || s.epoch != e)
				s.peak_bytes = s.in_use_bytes;
			fn(arg, (k << TFA_SITES_CHUNK_LG) | i, &s);
		}
	}
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
