/* SPDX-License-Identifier: MIT */
/* The shim's own mappings (see core/own_maps.h). */
#include "core/own_maps.h"

#include "core/common.h"
#include "core/lock.h"

/* The pointer table maps each of its 4096 shards apart; jemalloc's extents grow geometrically. */
#define OWN_MAX 16384

static tfa_leak_range_t own[OWN_MAX];
static size_t nown;
static bool overflowed;
static tfa_lock_t own_lock = TFA_LOCK_INIT;

void
tfa_own_maps_add(uintptr_t lo, size_t len)
{
	if (len == 0)
		return;
	tfa_lock(&own_lock);
	if (nown < OWN_MAX) {
		own[nown].lo = lo;
		own[nown].hi = lo + len;
		nown++;
	} else {
		overflowed = true;
	}
	tfa_unlock(&own_lock);
}

/* Takes [lo, lo + len) out of every entry: an entry is cut, split or dropped. */
void
tfa_own_maps_remove(uintptr_t lo, size_t len)
{
	uintptr_t hi = lo + len;

	if (len == 0)
		return;
	tfa_lock(&own_lock);
	for (size_t i = 0; i < nown;) {
		tfa_leak_range_t *r = &own[i];
		if (r->hi <= lo || r->lo >= hi) {
			i++;
			continue;
		}
		if (r->lo < lo && r->hi > hi) {
			/* The middle goes: two pieces. */
			if (nown < OWN_MAX) {
				own[nown].lo = hi;
				own[nown].hi = r->hi;
				nown++;
			} else {
				overflowed = true;
			}
			r->hi = lo;
			i++;
		} else if (r->lo < lo) {
			r->hi = lo;
			i++;
		} else if (r->hi > hi) {
			r->lo = hi;
			i++;
		} else {
			*r = own[--nown];
		}
	}
	tfa_unlock(&own_lock);
}

bool
tfa_own_maps_complete(void)
{
	tfa_lock(&own_lock);
	bool ok = !overflowed && nown != 0;
	tfa_unlock(&own_lock);
	return ok;
}

bool
tfa_own_maps_contains(uintptr_t addr)
{
	bool in = false;

	tfa_lock(&own_lock);
	for (size_t i = 0; i < nown && !in; i++)
		in = addr >= own[i].lo && addr < own[i].hi;
	tfa_unlock(&own_lock);
	return in;
}

static void
sift(tfa_leak_range_t *r, size_t root, size_t n)
{
	for (;;) {
		size_t c = 2 * root + 1;
		if (c >= n)
			return;
		if (c + 1 < n && r[c + 1].lo > r[c].lo)
			c++;
		if (r[root].lo >= r[c].lo)
			return;
		tfa_leak_range_t t = r[root];
		r[root] = r[c];
		r[c] = t;
		root = c;
	}
}

size_t
tfa_own_maps_snapshot(tfa_leak_range_t *out, size_t max)
{
	tfa_lock(&own_lock);
	size_t n = nown;
	if (n <= max)
		for (size_t i = 0; i < n; i++)
			out[i] = own[i];
	tfa_unlock(&own_lock);
	if (n > max)
		return 0;
	for (size_t i = n / 2; i-- > 0;)
		sift(out, i, n);
	for (size_t end = n; end-- > 1;) {
		tfa_leak_range_t t = out[0];
		out[0] = out[end];
		out[end] = t;
		sift(out, 0, end);
	}
	return n;
}

size_t
tfa_own_maps_count(void)
{
	tfa_lock(&own_lock);
	size_t n = nown;
	tfa_unlock(&own_lock);
	return n;
}

void
tfa_own_maps_prefork(void)
{
	tfa_lock(&own_lock);
}

void
tfa_own_maps_postfork_parent(void)
{
	tfa_unlock(&own_lock);
}

void
tfa_own_maps_postfork_child(void)
{
	tfa_lock_init(&own_lock);
}
