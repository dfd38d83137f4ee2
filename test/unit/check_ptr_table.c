/* SPDX-License-Identifier: MIT */
/*
 * core/ptr_table.h: insert, lookup, remove, growth to a million entries, the
 * bytes per live block while growing and behind a moving heap (shrinking),
 * backward-shift deletion, duplicates, recently freed pointers, foreach,
 * record packing at every field's limits, threads, and arena exhaustion.
 */
#include "core/ptr_table.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/thread.h"

/* Zeroed static storage is an empty table; each forked test gets a fresh one. */
static tfa_ptr_table_t table;

static uint64_t rng_state = UINT64_C(0x243f6a8885a308d3);

/* xorshift64*: reproducible pseudo-random numbers. */
static uint64_t
rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(0x2545F4914F6CDD1D);
}

/*
 * A distinct, 16-aligned, realistic (< 2^47) pointer for index i < 2^20:
 * random high bits, i in the low ones.
 */
static uintptr_t
fake_ptr(uint64_t i)
{
	return (uintptr_t)((((rng() & 0x7ffff) << 20) | (i & 0xfffff)) << 4) + 0x1000;
}

static tfa_record_t
make_rec(uintptr_t ptr, uint64_t requested, uint64_t id)
{
	tfa_alloc_info_t info = {
		.ptr = ptr,
		.requested = requested,
		.id = id,
		.thread = (uint32_t)(id & 0xffffff),
		.stack_id = (uint32_t)id * 3,
		.tag = (uint32_t)id * 5,
		.backend = (uint8_t)(id & 7),
		.kind = (uint8_t)((id >> 3) & 7),
		.device = (uint8_t)(id & 31),
		.lg_align = (uint8_t)(id & 63),
	};
	return tfa_record_pack(&info);
}

static void
insert_ok(uintptr_t ptr, uint64_t requested, uint64_t id)
{
	tfa_record_t rec = make_rec(ptr, requested, id);
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &rec, NULL), 0);
}

static void
teardown(void)
{
	tfa_arena_inject_failure(-1);
	tfa_ptr_table_destroy(&table);
}

/* ---- basics ------------------------------------------------------------------------------- */

START_TEST(test_ptr_table_insert_lookup_remove)
{
	tfa_record_t rec = make_rec(0x7f0000001000, 123, 42), out;

	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	ck_assert(!tfa_ptr_table_lookup(&table, 0x7f0000001000, &out));
	ck_assert(!tfa_ptr_table_remove(&table, 0x7f0000001000, &out));

	ck_assert_int_eq(tfa_ptr_table_insert(&table, &rec, NULL), 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);
	memset(&out, 0, sizeof(out));
	ck_assert(tfa_ptr_table_lookup(&table, 0x7f0000001000, &out));
	ck_assert_mem_eq(&out, &rec, sizeof(rec));
	ck_assert(tfa_ptr_table_lookup(&table, 0x7f0000001000, NULL));
	/* Neighbouring addresses are different keys. */
	ck_assert(!tfa_ptr_table_lookup(&table, 0x7f0000001010, NULL));
	ck_assert(!tfa_ptr_table_lookup(&table, 0x7f0000000ff0, NULL));
	ck_assert(!tfa_ptr_table_lookup(&table, 0, NULL));

	memset(&out, 0, sizeof(out));
	ck_assert(tfa_ptr_table_remove(&table, 0x7f0000001000, &out));
	ck_assert_mem_eq(&out, &rec, sizeof(rec));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	ck_assert(!tfa_ptr_table_lookup(&table, 0x7f0000001000, NULL));
	ck_assert(!tfa_ptr_table_remove(&table, 0x7f0000001000, NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);

	/* Remove with a NULL out. */
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &rec, NULL), 0);
	ck_assert(tfa_ptr_table_remove(&table, 0x7f0000001000, NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
}
END_TEST

START_TEST(test_ptr_table_duplicate_insert)
{
	tfa_record_t first = make_rec(0x5000, 10, 1), second = make_rec(0x5000, 20, 2);
	tfa_record_t replaced, out;

	ck_assert_int_eq(tfa_ptr_table_insert(&table, &first, &replaced), 0);
	memset(&replaced, 0, sizeof(replaced));
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &second, &replaced), 1);
	ck_assert_mem_eq(&replaced, &first, sizeof(first));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);
	ck_assert(tfa_ptr_table_lookup(&table, 0x5000, &out));
	ck_assert_mem_eq(&out, &second, sizeof(second));

	/* A NULL replaced is allowed. */
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &first, NULL), 1);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);
	ck_assert(tfa_ptr_table_lookup(&table, 0x5000, &out));
	ck_assert_mem_eq(&out, &first, sizeof(first));
	ck_assert(tfa_ptr_table_remove(&table, 0x5000, NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
}
END_TEST

START_TEST(test_ptr_table_recently_freed)
{
	ck_assert(!tfa_ptr_table_recently_freed(&table, 0x9000));
	insert_ok(0x9000, 1, 1);
	ck_assert(!tfa_ptr_table_recently_freed(&table, 0x9000));
	ck_assert(tfa_ptr_table_remove(&table, 0x9000, NULL));
	ck_assert(tfa_ptr_table_recently_freed(&table, 0x9000));
	/* A failed remove does not make a pointer "recently freed". */
	ck_assert(!tfa_ptr_table_remove(&table, 0xa000, NULL));
	ck_assert(!tfa_ptr_table_recently_freed(&table, 0xa000));

	/*
	 * After many more frees the memory is finite: old ones are forgotten,
	 * both this thread's list of its last frees and the tombstones.
	 */
	for (uint64_t i = 0; i < (uint64_t)TFA_PTR_SHARDS * TFA_RECENT_FREES; i++) {
		uintptr_t p = 0x10000 + (uintptr_t)i * 16;
		insert_ok(p, 1, i + 1);
		ck_assert(tfa_ptr_table_remove(&table, p, NULL));
		ck_assert(tfa_ptr_table_recently_freed(&table, p));
	}
	ck_assert(!tfa_ptr_table_recently_freed(&table, 0x9000));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
}
END_TEST

/* ---- scale -------------------------------------------------------------------------------- */

#define MANY (1u << 20)

START_TEST(test_ptr_table_million_pointers)
{
	uintptr_t *ptrs = malloc(MANY * sizeof(*ptrs));
	tfa_record_t out;
	tfa_alloc_info_t info;

	ck_assert_ptr_nonnull(ptrs);
	for (uint64_t i = 0; i < MANY; i++) {
		ptrs[i] = fake_ptr(i);
		insert_ok(ptrs[i], i, i + 1);
	}
	ck_assert_uint_eq(tfa_ptr_table_count(&table), MANY);
	for (uint64_t i = 0; i < MANY; i++) {
		if (!tfa_ptr_table_lookup(&table, ptrs[i], &out))
			ck_abort_msg("pointer %llu of %u not found", (unsigned long long)i, MANY);
		tfa_record_unpack(&out, &info);
		if (info.requested != i || info.id != i + 1 || info.ptr != ptrs[i])
			ck_abort_msg("pointer %llu: wrong record", (unsigned long long)i);
	}

	/* Remove every odd one: the even ones stay findable. */
	for (uint64_t i = 1; i < MANY; i += 2)
		if (!tfa_ptr_table_remove(&table, ptrs[i], &out))
			ck_abort_msg("remove of %llu failed", (unsigned long long)i);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), MANY / 2);
	for (uint64_t i = 0; i < MANY; i++) {
		bool found = tfa_ptr_table_lookup(&table, ptrs[i], &out);
		if (found != ((i & 1) == 0))
			ck_abort_msg("pointer %llu: found=%d after removing the odd ones",
			             (unsigned long long)i, (int)found);
		if (found) {
			tfa_record_unpack(&out, &info);
			if (info.requested != i)
				ck_abort_msg("pointer %llu: wrong record", (unsigned long long)i);
		}
	}
	for (uint64_t i = 0; i < MANY; i += 2)
		ck_assert(tfa_ptr_table_remove(&table, ptrs[i], NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	free(ptrs);
}
END_TEST

/*
 * The memory target: 64 bytes of table per live block.  Pages are the unit of
 * a shard's mapping, so a shard of a few records costs more: each shard used
 * may take up to 16 KiB beyond 64 bytes per block.  On a heap of blocks 16
 * bytes apart (32 shards) the table must keep to that at every size from 1 to
 * a million blocks, right after every growth included; then, with tombstones
 * (every free leaves one until a rebuild) and live blocks rising and
 * falling, at every moment the table grows.
 */
#define BPB_N     1000000u
#define BPB_BASE  ((uintptr_t)0x7e0000000000)
#define BPB_SLACK ((uint64_t)16 << 10)

static uint64_t
bpb_shards(const uint8_t *seen)
{
	uint64_t n = 0;
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++)
		n += seen[k];
	return n;
}

START_TEST(test_ptr_table_bytes_per_block)
{
	static uint8_t seen[TFA_PTR_SHARDS];
	static uint8_t live_at[BPB_N];
	uint64_t base = tfa_arena_mapped_bytes(), shards = 0, worst = 0;

	for (uint64_t n = 1; n <= BPB_N; n++) {
		uintptr_t p = BPB_BASE + n * 16;
		insert_ok(p, n, n);
		live_at[n - 1] = 1;
		size_t k = (size_t)(tfa_ptr_shard_of(&table, p) - table.shards);
		if (!seen[k]) {
			seen[k] = 1;
			shards++;
		}
		uint64_t bytes = tfa_arena_mapped_bytes() - base;
		if (bytes > 64 * n + BPB_SLACK * shards)
			ck_abort_msg("%llu bytes for %llu blocks in %llu shards", (unsigned long long)bytes,
				     (unsigned long long)n, (unsigned long long)shards);
		if (n >= 100000 && bytes * 1000 / n > worst)
			worst = bytes * 1000 / n;
	}
	ck_assert_uint_eq(tfa_ptr_table_bytes(&table), tfa_arena_mapped_bytes() - base);
	ck_assert_uint_eq(tfa_ptr_table_peak_bytes(&table), tfa_ptr_table_bytes(&table));
	ck_assert_uint_le(worst, 64000);

	/* Random frees and allocations in the same blocks, the live count a slow wave. */
	uint64_t live = BPB_N, last = tfa_arena_mapped_bytes() - base;
	for (uint64_t step = 0; step < 4 * BPB_N; step++) {
		bool grow_phase = (step / 400000) % 2 == 1;
		uint64_t i = rng() % BPB_N;
		uintptr_t p = BPB_BASE + (i + 1) * 16;
		if (live_at[i] && (!grow_phase || rng() % 4 == 0)) {
			ck_assert(tfa_ptr_table_remove(&table, p, NULL));
			live_at[i] = 0;
			live--;
		} else if (!live_at[i]) {
			insert_ok(p, i, i);
			live_at[i] = 1;
			live++;
		}
		uint64_t bytes = tfa_arena_mapped_bytes() - base;
		if (bytes > last && bytes > 64 * live + BPB_SLACK * bpb_shards(seen))
			ck_abort_msg("grew to %llu bytes for %llu live blocks", (unsigned long long)bytes,
				     (unsigned long long)live);
		last = bytes;
	}
	ck_assert_uint_eq(tfa_ptr_table_count(&table), live);
}
END_TEST

/*
 * A heap that moves: 200,000 blocks in one place, all freed, then as many
 * elsewhere, four times.  Shards left empty shrink when others grow past 56
 * bytes per block of the most the table held (under the 64 bytes the peak
 * is held to), so the table's peak is that of one round, not the sum of the
 * four; and the shards shrunk still serve.  Frees leave tombstones: only the
 * owner's count of live records (live_hint) tells the sweep which shards
 * emptied, so the case runs twice: by the table's calls, and as the shim's
 * fast path changes the table (its own insert, find and remove; the table's
 * insert when the fast one declines).
 */
#define MOVE_N      200000u
#define MOVE_ROUNDS 4

static void
move_insert(uintptr_t p, uint64_t i, bool fast)
{
	tfa_record_t rec = make_rec(p, i, i);

	if (!fast || !tfa_ptr_fast_insert(tfa_ptr_shard_of(&table, p), p, rec.size_meta, rec.id_thread,
					  rec.stack_id, rec.tag, false))
		insert_ok(p, i, i);
}

static void
move_remove(uintptr_t p, bool fast)
{
	if (!fast) {
		ck_assert(tfa_ptr_table_remove(&table, p, NULL));
		return;
	}
	tfa_ptr_shard_t *s = tfa_ptr_shard_of(&table, p);
	int64_t i = tfa_ptr_fast_find(s, p);
	ck_assert_int_ge(i, 0);
	ck_assert(tfa_ptr_owned_remove(s, (uint64_t)i, p));
}

/* With one thread the owner's count of live records is exact, shard by shard. */
static void
check_live_hints(void)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++) {
		const tfa_ptr_shard_t *s = &table.shards[k];
		uint64_t live = 0;
		for (uint64_t i = 0; s->slots != NULL && i < s->cap; i++)
			live += s->slots[i].ptr > TFA_PTR_BUSY && !TFA_PTR_IS_TOMBSTONE(s->slots[i].ptr);
		if (s->live_hint != live)
			ck_abort_msg("shard %u: live_hint %llu, %llu live records", k,
				     (unsigned long long)s->live_hint, (unsigned long long)live);
	}
}

START_TEST(test_ptr_table_shrinks_behind_a_moving_heap)
{
	static uint8_t seen[TFA_PTR_SHARDS];
	uint64_t shards = 0;
	bool fast = _i == 1;

	for (uint64_t r = 0; r < MOVE_ROUNDS; r++) {
		uintptr_t base = 0x7d0000000000 + r * ((uintptr_t)64 << 20);
		for (uint64_t i = 0; i < MOVE_N; i++) {
			move_insert(base + i * 16, i, fast);
			size_t k = (size_t)(tfa_ptr_shard_of(&table, base + i * 16) - table.shards);
			shards += !seen[k];
			seen[k] = 1;
		}
		ck_assert_uint_eq(tfa_ptr_table_count(&table), MOVE_N);
		check_live_hints();
		for (uint64_t i = 0; i < MOVE_N; i++)
			move_remove(base + i * 16, fast);
		check_live_hints();
	}
	uint64_t peak = tfa_ptr_table_peak_bytes(&table);
	if (peak > 64 * MOVE_N + BPB_SLACK * shards)
		ck_abort_msg("peak %llu bytes for %u blocks in %llu shards", (unsigned long long)peak,
			     MOVE_N, (unsigned long long)shards);
	ck_assert_uint_le(tfa_ptr_table_bytes(&table), peak);
	/* Every region again, the shrunk shards included. */
	for (uint64_t r = 0; r < MOVE_ROUNDS; r++)
		insert_ok(0x7d0000000000 + r * ((uintptr_t)64 << 20) + 4096, r, r);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), MOVE_ROUNDS);
	for (uint64_t r = 0; r < MOVE_ROUNDS; r++)
		ck_assert(tfa_ptr_table_lookup(&table, 0x7d0000000000 + r * ((uintptr_t)64 << 20) + 4096, NULL));
}
END_TEST

/*
 * Removal in random order: remove entries one at a time in random order and
 * check after every removal that all the others are still found.
 * Adjacent addresses of one region make long probe runs across shard slots.
 */
#define SHIFT_N 3000

START_TEST(test_ptr_table_random_removal)
{
	static uintptr_t ptrs[SHIFT_N];
	static bool gone[SHIFT_N];
	uint32_t order[SHIFT_N];

	for (uint32_t i = 0; i < SHIFT_N; i++) {
		ptrs[i] = (_i == 0) ? 0x7f1200000000 + (uintptr_t)i * 16 : fake_ptr(i);
		insert_ok(ptrs[i], i, i + 1);
		order[i] = i;
	}
	for (uint32_t i = SHIFT_N - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rng() % (i + 1));
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (uint32_t k = 0; k < SHIFT_N; k++) {
		uint32_t victim = order[k];
		tfa_record_t out;
		ck_assert(tfa_ptr_table_remove(&table, ptrs[victim], &out));
		gone[victim] = true;
		for (uint32_t i = 0; i < SHIFT_N; i++) {
			bool found = tfa_ptr_table_lookup(&table, ptrs[i], NULL);
			if (found == gone[i])
				ck_abort_msg("after removing %u (#%u): pointer %u found=%d", victim,
				             k, i, (int)found);
		}
		ck_assert_uint_eq(tfa_ptr_table_count(&table), SHIFT_N - k - 1);
	}
}
END_TEST

/* Interleaved inserts and removes keep the table exact (a model check). */
START_TEST(test_ptr_table_churn)
{
	enum { N = 20000, OPS = 400000 };
	static uintptr_t ptrs[N];
	static bool live[N];
	uint64_t nlive = 0;

	for (uint32_t i = 0; i < N; i++)
		ptrs[i] = fake_ptr(i);
	for (uint32_t op = 0; op < OPS; op++) {
		uint32_t i = (uint32_t)(rng() % N);
		if (live[i]) {
			ck_assert(tfa_ptr_table_remove(&table, ptrs[i], NULL));
			live[i] = false;
			nlive--;
		} else {
			insert_ok(ptrs[i], i, op + 1);
			live[i] = true;
			nlive++;
		}
	}
	ck_assert_uint_eq(tfa_ptr_table_count(&table), nlive);
	for (uint32_t i = 0; i < N; i++)
		ck_assert(tfa_ptr_table_lookup(&table, ptrs[i], NULL) == live[i]);
}
END_TEST

/* ---- foreach ------------------------------------------------------------------------------ */

#define FOREACH_N 10000

struct foreach_ctx {
	uint32_t visits[FOREACH_N];
	uint64_t calls;
	uint64_t bad;
};

static void
foreach_cb(void *arg, const tfa_record_t *rec)
{
	struct foreach_ctx *c = arg;
	tfa_alloc_info_t info;

	tfa_record_unpack(rec, &info);
	c->calls++;
	if (info.requested >= FOREACH_N || info.ptr != 0x400000 + info.requested * 32)
		c->bad++;
	else
		c->visits[info.requested]++;
}

START_TEST(test_ptr_table_foreach_visits_each_once)
{
	static struct foreach_ctx ctx;

	tfa_ptr_table_foreach(&table, foreach_cb, &ctx);
	ck_assert_uint_eq(ctx.calls, 0);

	for (uint64_t i = 0; i < FOREACH_N; i++)
		insert_ok(0x400000 + i * 32, i, i + 1);
	/* Removing some first: only live records are visited. */
	for (uint64_t i = 0; i < FOREACH_N; i += 10)
		ck_assert(tfa_ptr_table_remove(&table, 0x400000 + i * 32, NULL));
	tfa_ptr_table_foreach(&table, foreach_cb, &ctx);
	ck_assert_uint_eq(ctx.bad, 0);
	ck_assert_uint_eq(ctx.calls, FOREACH_N - FOREACH_N / 10);
	for (uint32_t i = 0; i < FOREACH_N; i++)
		ck_assert_uint_eq(ctx.visits[i], (i % 10 == 0) ? 0 : 1);
}
END_TEST

/* ---- records ------------------------------------------------------------------------------ */

START_TEST(test_ptr_table_record_pack_limits)
{
	static const uint64_t requested[] = { 0, 1, 4096, TFA_REQUESTED_MAX - 1,
		                              TFA_REQUESTED_MAX };
	static const uint64_t ids[] = { 0, 1, UINT32_MAX + UINT64_C(1), TFA_ID_MAX };
	static const uint32_t threads[] = { 0, 1, 0x800000, 0xffffff };
	static const uint8_t lg_aligns[] = { 0, 1, 12, 62, 63 };
	static const uint8_t devices[] = { 0, 1, 30, 31 };
	static const uint32_t u32s[] = { 0, 1, UINT32_MAX };
	static const uintptr_t ptrs[] = { 0x10, 0x7ffffffffff0, UINTPTR_MAX - 15 };
	const uint64_t combos = TFA_ARRAY_SIZE(requested) * TFA_ARRAY_SIZE(ids)
	                        * TFA_ARRAY_SIZE(threads) * TFA_ARRAY_SIZE(lg_aligns)
	                        * TFA_ARRAY_SIZE(devices) * 8 * 8 * TFA_ARRAY_SIZE(u32s);

	ck_assert_uint_eq(TFA_REQUESTED_MAX, (UINT64_C(1) << 47) - 1);
	ck_assert_uint_eq(TFA_ID_MAX, (UINT64_C(1) << 40) - 1);
	/* Every combination: k read as a mixed-radix number, one digit per field. */
	for (uint64_t k = 0; k < combos; k++) {
		uint64_t r = k;
		size_t a = r % TFA_ARRAY_SIZE(requested);
		r /= TFA_ARRAY_SIZE(requested);
		size_t b = r % TFA_ARRAY_SIZE(ids);
		r /= TFA_ARRAY_SIZE(ids);
		size_t c = r % TFA_ARRAY_SIZE(threads);
		r /= TFA_ARRAY_SIZE(threads);
		size_t d = r % TFA_ARRAY_SIZE(lg_aligns);
		r /= TFA_ARRAY_SIZE(lg_aligns);
		size_t e = r % TFA_ARRAY_SIZE(devices);
		r /= TFA_ARRAY_SIZE(devices);
		uint8_t kind = (uint8_t)(r % 8);
		r /= 8;
		uint8_t backend = (uint8_t)(r % 8);
		r /= 8;
		size_t f = r % TFA_ARRAY_SIZE(u32s);

		tfa_alloc_info_t in = {
			.ptr = ptrs[(a + b + f) % TFA_ARRAY_SIZE(ptrs)],
			.requested = requested[a],
			.id = ids[b],
			.thread = threads[c],
			.stack_id = u32s[f],
			.tag = u32s[(f + c) % TFA_ARRAY_SIZE(u32s)],
			.backend = backend,
			.kind = kind,
			.device = devices[e],
			.lg_align = lg_aligns[d],
		};
		tfa_alloc_info_t out;
		memset(&out, 0x77, sizeof(out));
		tfa_record_t rec = tfa_record_pack(&in);
		tfa_record_unpack(&rec, &out);
		if (out.ptr != in.ptr || out.requested != in.requested || out.id != in.id
		    || out.thread != in.thread || out.stack_id != in.stack_id || out.tag != in.tag
		    || out.backend != in.backend || out.kind != in.kind || out.device != in.device
		    || out.lg_align != in.lg_align)
			ck_abort_msg("round trip failed: requested %llu id %llu thread %u lg %u "
			             "device %u kind %u backend %u",
			             (unsigned long long)in.requested, (unsigned long long)in.id,
			             in.thread, in.lg_align, in.device, in.kind, in.backend);
	}
	ck_assert_uint_gt(combos, 100000);
}
END_TEST

/* One field at its maximum never leaks into its neighbours. */
START_TEST(test_ptr_table_record_fields_isolated)
{
	tfa_alloc_info_t in, out;

	memset(&in, 0, sizeof(in));
	in.requested = TFA_REQUESTED_MAX;
	tfa_record_t r = tfa_record_pack(&in);
	tfa_record_unpack(&r, &out);
	ck_assert_uint_eq(out.requested, TFA_REQUESTED_MAX);
	ck_assert_uint_eq(out.backend, 0);
	ck_assert_uint_eq(out.kind, 0);
	ck_assert_uint_eq(out.device, 0);
	ck_assert_uint_eq(out.lg_align, 0);

	memset(&in, 0, sizeof(in));
	in.lg_align = 63;
	in.backend = 7;
	r = tfa_record_pack(&in);
	tfa_record_unpack(&r, &out);
	ck_assert_uint_eq(out.requested, 0);
	ck_assert_uint_eq(out.lg_align, 63);
	ck_assert_uint_eq(out.backend, 7);
	ck_assert_uint_eq(out.kind, 0);
	ck_assert_uint_eq(out.device, 0);

	memset(&in, 0, sizeof(in));
	in.id = TFA_ID_MAX;
	r = tfa_record_pack(&in);
	tfa_record_unpack(&r, &out);
	ck_assert_uint_eq(out.id, TFA_ID_MAX);
	ck_assert_uint_eq(out.thread, 0);

	memset(&in, 0, sizeof(in));
	in.thread = 0xffffff;
	r = tfa_record_pack(&in);
	tfa_record_unpack(&r, &out);
	ck_assert_uint_eq(out.id, 0);
	ck_assert_uint_eq(out.thread, 0xffffff);

	/* An empty info packs to an empty slot but for the pointer. */
	memset(&in, 0, sizeof(in));
	in.ptr = 0x1230;
	r = tfa_record_pack(&in);
	ck_assert_uint_eq(r.ptr, 0x1230);
	ck_assert_uint_eq(r.size_meta, 0);
	ck_assert_uint_eq(r.id_thread, 0);
	ck_assert_uint_eq(r.stack_id, 0);
	ck_assert_uint_eq(r.tag, 0);
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------ */

#ifdef __SANITIZE_THREAD__
/* ThreadSanitizer (build-tsan/) runs the threaded cases 10 times smaller: shards still grow and
 * purge under the other threads, and TSan sees each racing pair of accesses once it happens. */
#	define TSAN_SCALE 10
#else
#	define TSAN_SCALE 1
#endif

#define MT_THREADS 4
#define MT_N       (100000 / TSAN_SCALE)

static uint64_t mt_errors;

static uintptr_t
mt_ptr(uint64_t t, uint64_t i)
{
	return (uintptr_t)(((t + 1) << 36) | (i << 4));
}

static void *
mt_worker(void *arg)
{
	uint64_t t = (uint64_t)(uintptr_t)arg;
	tfa_record_t out;

	for (uint64_t i = 0; i < MT_N; i++) {
		tfa_record_t rec = make_rec(mt_ptr(t, i), i, t * MT_N + i + 1);
		if (tfa_ptr_table_insert(&table, &rec, NULL) != 0)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	for (uint64_t i = 0; i < MT_N; i++) {
		if (!tfa_ptr_table_lookup(&table, mt_ptr(t, i), &out) || out.ptr != mt_ptr(t, i))
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	/* Remove the odd ones, re-insert and remove again some of them. */
	for (uint64_t i = 1; i < MT_N; i += 2) {
		if (!tfa_ptr_table_remove(&table, mt_ptr(t, i), &out))
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
		if (i % 7 == 1) {
			tfa_record_t rec = make_rec(mt_ptr(t, i), i, 1);
			if (tfa_ptr_table_insert(&table, &rec, NULL) != 0
			    || !tfa_ptr_table_remove(&table, mt_ptr(t, i), NULL))
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

START_TEST(test_ptr_table_threads)
{
	pthread_t th[MT_THREADS];

	for (uintptr_t t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, mt_worker, (void *)t), 0);
	for (int t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	ck_assert_uint_eq(mt_errors, 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), MT_THREADS * (MT_N / 2));
	for (uint64_t t = 0; t < MT_THREADS; t++)
		for (uint64_t i = 0; i < MT_N; i++)
			if (tfa_ptr_table_lookup(&table, mt_ptr(t, i), NULL) != ((i & 1) == 0))
				ck_abort_msg("thread %llu pointer %llu in the wrong state",
				             (unsigned long long)t, (unsigned long long)i);
}
END_TEST

/*
 * Threads sharing shards: pointer i of thread t is interleaved with the other
 * threads' (same 64 KiB regions, neighbouring slots), so inserts race for
 * slots, and shards grow and purge while other threads operate on them.
 * Half the threads announce their operations (registered), half take the
 * rebuild lock (unregistered): both protocols run against each other.
 */
#define SHARE_THREADS 4
#define SHARE_N       (60000 / TSAN_SCALE)

static uintptr_t
share_ptr(uint64_t t, uint64_t i)
{
	return (uintptr_t)0x7e0000000000 + (uintptr_t)(i * SHARE_THREADS + t) * 16;
}

static void *
share_worker(void *arg)
{
	uint64_t t = (uint64_t)(uintptr_t)arg;
	tfa_record_t out;

	if (t % 2 == 0)
		(void)tfa_thread_rec();
	for (int round = 0; round < 3; round++) {
		for (uint64_t i = 0; i < SHARE_N; i++) {
			tfa_record_t rec = make_rec(share_ptr(t, i), i, t * SHARE_N + i + 1);
			if (tfa_ptr_table_insert(&table, &rec, NULL) != 0)
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
		}
		for (uint64_t i = 0; i < SHARE_N; i++) {
			bool found = tfa_ptr_table_remove(&table, share_ptr(t, i), &out);
			tfa_alloc_info_t info;
			tfa_record_unpack(&out, &info);
			if (!found || info.requested != i || info.id != t * SHARE_N + i + 1)
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
		}
	}
	/* Leave every third one in. */
	for (uint64_t i = 0; i < SHARE_N; i += 3) {
		tfa_record_t rec = make_rec(share_ptr(t, i), i, i + 1);
		if (tfa_ptr_table_insert(&table, &rec, NULL) != 0)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static bool walker_stop;

/* Walks the table while the workers change it: every record seen is whole. */
static void
walk_cb(void *arg, const tfa_record_t *rec)
{
	tfa_alloc_info_t info;
	uint64_t *bad = arg;

	tfa_record_unpack(rec, &info);
	uint64_t idx = (info.ptr - 0x7e0000000000) / 16;
	if (info.ptr < 0x7e0000000000 || info.requested != idx / SHARE_THREADS)
		(*bad)++;
}

static void *
walker(void *arg)
{
	uint64_t *bad = arg;

	(void)tfa_thread_rec();
	while (!__atomic_load_n(&walker_stop, __ATOMIC_RELAXED)) {
		tfa_ptr_table_foreach(&table, walk_cb, bad);
		(void)tfa_ptr_table_count(&table);
	}
	return NULL;
}

START_TEST(test_ptr_table_threads_share_shards)
{
	pthread_t th[SHARE_THREADS], w;
	uint64_t bad = 0;

	ck_assert_int_eq(pthread_create(&w, NULL, walker, &bad), 0);
	for (uintptr_t t = 0; t < SHARE_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, share_worker, (void *)t), 0);
	for (int t = 0; t < SHARE_THREADS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	__atomic_store_n(&walker_stop, true, __ATOMIC_RELAXED);
	ck_assert_int_eq(pthread_join(w, NULL), 0);
	ck_assert_uint_eq(mt_errors, 0);
	ck_assert_uint_eq(bad, 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), SHARE_THREADS * ((SHARE_N + 2) / 3));
	for (uint64_t t = 0; t < SHARE_THREADS; t++)
		for (uint64_t i = 0; i < SHARE_N; i++)
			if (tfa_ptr_table_lookup(&table, share_ptr(t, i), NULL) != (i % 3 == 0))
				ck_abort_msg("thread %llu pointer %llu in the wrong state",
				             (unsigned long long)t, (unsigned long long)i);
}
END_TEST

/* Two threads free the same pointers at once: each is removed exactly once. */
#define RACE_N (200000 / TSAN_SCALE)

static uint64_t race_wins[2];
static pthread_barrier_t race_go;

static void *
race_worker(void *arg)
{
	uintptr_t t = (uintptr_t)arg;

	(void)tfa_thread_rec();
	pthread_barrier_wait(&race_go);
	for (uint64_t i = 0; i < RACE_N; i++)
		if (tfa_ptr_table_remove(&table, 0x7d0000000000 + (uintptr_t)i * 32, NULL))
			race_wins[t]++;
	return NULL;
}

START_TEST(test_ptr_table_remove_race)
{
	pthread_t th[2];

	for (uint64_t i = 0; i < RACE_N; i++)
		insert_ok(0x7d0000000000 + (uintptr_t)i * 32, i, i + 1);
	ck_assert_int_eq(pthread_barrier_init(&race_go, NULL, 2), 0);
	for (uintptr_t t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, race_worker, (void *)t), 0);
	for (int t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	ck_assert_uint_eq(race_wins[0] + race_wins[1], RACE_N);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
}
END_TEST

/* A stale record (its free bypassed the table) is handed to the hook when a rebuild meets it. */
static uint64_t stale_seen;
static uintptr_t stale_ptr;

static void
stale_cb(void *arg, const tfa_record_t *rec)
{
	(void)arg;
	stale_seen++;
	stale_ptr = (uintptr_t)rec->ptr;
}

START_TEST(test_ptr_table_stale_dropped_by_rebuild)
{
	tfa_record_t a = make_rec(0x7c0000000000, 1, 1), b = make_rec(0x7c0000000000, 2, 2);
	tfa_ptr_held_t h;

	tfa_ptr_table_set_stale_hook(&table, stale_cb, NULL);
	insert_ok(0x7c0000000000 + 4096, 9, 9); /* maps the shard */
	/* Put a's record beyond a tombstone on its own probe path, as an unseen free would. */
	tfa_ptr_shard_t *sh = tfa_ptr_shard_of(&table, 0x7c0000000000);
	uint64_t home = tfa_ptr_home(0x7c0000000000, sh->cap);
	uint64_t next = tfa_ptr_next(home, sh->cap);
	ck_assert_uint_eq(sh->slots[home].ptr, 0);
	sh->slots[home].ptr = 0x1001; /* a tombstone */
	sh->slots[next] = a;
	sh->used += 2;
	/* The insert takes the tombstone: b shadows a. */
	h = tfa_ptr_table_hold(&table, b.ptr);
	ck_assert_int_eq(tfa_ptr_held_insert(h, &b, NULL), 0);
	tfa_ptr_table_release(h);
	tfa_record_t out;
	ck_assert(tfa_ptr_table_lookup(&table, a.ptr, &out));
	ck_assert_mem_eq(&out, &b, sizeof(b));
	/* Fill the shard until it rebuilds: a is dropped, b stays. */
	for (uint64_t i = 2; stale_seen == 0 && i < 100000; i++)
		insert_ok(0x7c0000000000 + 4096 + i * 16, i, i);
	ck_assert_uint_eq(stale_seen, 1);
	ck_assert_uint_eq(stale_ptr, a.ptr);
	ck_assert(tfa_ptr_table_lookup(&table, a.ptr, &out));
	ck_assert_mem_eq(&out, &b, sizeof(b));
	ck_assert(tfa_ptr_table_remove(&table, a.ptr, NULL));
	ck_assert(!tfa_ptr_table_lookup(&table, a.ptr, NULL));
	tfa_ptr_table_set_stale_hook(&table, NULL, NULL);
}
END_TEST

/* A double free leaves a tombstone: recognised as recently freed from any thread. */
static void *
other_thread_check(void *arg)
{
	return (void *)(uintptr_t)tfa_ptr_table_recently_freed(&table, (uintptr_t)arg);
}

START_TEST(test_ptr_table_tombstone_tells_double_free)
{
	pthread_t th;
	void *seen;

	insert_ok(0x7b0000000000, 1, 1);
	insert_ok(0x7b0000000000 + 16, 2, 2);
	/* Every free leaves a tombstone (its slot empties only at a rebuild). */
	ck_assert(tfa_ptr_table_remove(&table, 0x7b0000000000, NULL));
	ck_assert_int_eq(pthread_create(&th, NULL, other_thread_check, (void *)(uintptr_t)0x7b0000000000), 0);
	ck_assert_int_eq(pthread_join(th, &seen), 0);
	ck_assert(seen != NULL);
	ck_assert_int_eq(pthread_create(&th, NULL, other_thread_check, (void *)(uintptr_t)0x7b0000000020), 0);
	ck_assert_int_eq(pthread_join(th, &seen), 0);
	ck_assert(seen == NULL);
}
END_TEST

/* ---- memory ------------------------------------------------------------------------------- */

START_TEST(test_ptr_table_arena_exhausted)
{
	tfa_record_t rec = make_rec(0x8000, 1, 1);

	tfa_arena_inject_failure(0);
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &rec, NULL), -ENOMEM);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	ck_assert(!tfa_ptr_table_lookup(&table, 0x8000, NULL));
	ck_assert(!tfa_ptr_table_remove(&table, 0x8000, NULL));

	tfa_arena_inject_failure(-1);
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &rec, NULL), 0);
	ck_assert(tfa_ptr_table_lookup(&table, 0x8000, NULL));

	/*
	 * Growth failing with every shard mapped: shards past 3/4 load that
	 * cannot double still take records until they are full, then refuse;
	 * nothing already in the table is lost.
	 */
	uint64_t inserted = 1;
	for (uint64_t i = 1; i < 20000; i++, inserted++)
		insert_ok(0x8000 + i * 16, i, i + 1);
	tfa_arena_inject_failure(0);
	uint64_t before = inserted;
	int r = 0;
	for (uint64_t i = inserted; i < 200000 && r == 0; i++) {
		tfa_record_t more = make_rec(0x8000 + i * 16, i, i + 1);
		r = tfa_ptr_table_insert(&table, &more, NULL);
		if (r == 0)
			inserted++;
	}
	ck_assert_int_eq(r, -ENOMEM);
	ck_assert_uint_gt(inserted, before);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), inserted);
	for (uint64_t i = 0; i < inserted; i++)
		ck_assert(tfa_ptr_table_lookup(&table, 0x8000 + i * 16, NULL));
	/* Removing still works, and makes room again. */
	ck_assert(tfa_ptr_table_remove(&table, 0x8000, NULL));
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &rec, NULL), 0);
	/*
	 * Frees leave tombstones, not empty slots: a starved shard whose probe
	 * reaches its one empty slot before any tombstone purges them (no
	 * memory needed) rather than refusing.  A pointer whose probe runs
	 * through live records only into the empty slot, after a free
	 * elsewhere in the shard:
	 */
	tfa_ptr_shard_t *sh = tfa_ptr_shard_of(&table, 0x8000);
	ck_assert(sh->starved);
	uint64_t empty = sh->cap;
	for (uint64_t i = 0; i < sh->cap && empty == sh->cap; i++)
		if (sh->slots[i].ptr == 0)
			empty = i;
	ck_assert_uint_lt(empty, sh->cap);
	uintptr_t probe = 0;
	uint64_t from = 0;
	for (uintptr_t p = 0x10; p < 0x80000 && probe == 0; p += 16) {
		uint64_t h = tfa_ptr_home(p, sh->cap);
		if (h <= empty && empty - h < 64 && tfa_ptr_shard_of(&table, p) == sh
		    && !tfa_ptr_table_lookup(&table, p, NULL)) {
			probe = p;
			from = h;
		}
	}
	ck_assert_uint_ne(probe, 0);
	for (uint64_t i = from; i < empty; i++)
		ck_assert(sh->slots[i].ptr != 0 && !TFA_PTR_IS_TOMBSTONE(sh->slots[i].ptr));
	uintptr_t gone = 0;
	for (uint64_t i = 0; i < sh->cap && gone == 0; i++)
		if ((i < from || i > empty) && sh->slots[i].ptr != 0 && !TFA_PTR_IS_TOMBSTONE(sh->slots[i].ptr))
			gone = (uintptr_t)sh->slots[i].ptr;
	ck_assert(tfa_ptr_table_remove(&table, gone, NULL));
	tfa_record_t late = make_rec(probe, 5, 5);
	ck_assert_int_eq(tfa_ptr_table_insert(&table, &late, NULL), 0);
	ck_assert(tfa_ptr_table_lookup(&table, probe, NULL));
	ck_assert(!tfa_ptr_table_lookup(&table, gone, NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), inserted);
	tfa_arena_inject_failure(-1);
}
END_TEST

/*
 * A shard's first slots (TFA_PTR_CAP_INITIAL): 512 bytes at its place in the
 * table's reservation, so that regions holding a block or two cost that
 * much, not a page each; its first rebuild takes it to a page of its own and
 * empties the first slots; a sweep takes a shard whose records fell to 4
 * back to them; destroy empties them for the next use.
 */
#define FIRST_BASE ((uintptr_t)0x7e0000000000)
#define FIRST_REGION ((uintptr_t)512 << 10)

START_TEST(test_ptr_table_first_slots)
{
	uint64_t base = tfa_arena_mapped_bytes();

	for (uint64_t r = 0; r < 64; r++)
		insert_ok(FIRST_BASE + r * FIRST_REGION + 64, r, r + 1);
	ck_assert_uint_eq(tfa_ptr_table_bytes(&table), 64 * 16 * sizeof(tfa_record_t));
	ck_assert_uint_eq(tfa_arena_mapped_bytes() - base, 64 * 16 * sizeof(tfa_record_t));
	tfa_ptr_shard_t *a = tfa_ptr_shard_of(&table, FIRST_BASE + 64);
	tfa_record_t *first = table.small + (size_t)(a - table.shards) * TFA_PTR_CAP_INITIAL;
	ck_assert_uint_eq(a->cap, TFA_PTR_CAP_INITIAL);
	ck_assert_ptr_eq(a->slots, first);
	/* 12 records fit (3/4); the 13th: a page of its own, every record still there, the first slots empty. */
	for (uint64_t i = 1; i < 12; i++)
		insert_ok(FIRST_BASE + 64 + i * 16, i, 100 + i);
	ck_assert_uint_eq(a->cap, TFA_PTR_CAP_INITIAL);
	insert_ok(FIRST_BASE + 64 + 12 * 16, 12, 112);
	ck_assert_uint_eq(a->cap, TFA_PTR_CAP_STEP);
	ck_assert_ptr_ne(a->slots, first);
	for (uint64_t i = 0; i < 13; i++)
		ck_assert(tfa_ptr_table_lookup(&table, FIRST_BASE + 64 + i * 16, NULL));
	for (uint64_t k = 0; k < TFA_PTR_CAP_INITIAL; k++)
		ck_assert_uint_eq(first[k].ptr, 0);
	ck_assert_uint_eq(tfa_arena_mapped_bytes() - base, 63 * 16 * sizeof(tfa_record_t) + 4096);
	/* Down to 2 records; another shard grows past a page twice, and its sweep shrinks this one. */
	for (uint64_t i = 2; i < 13; i++)
		ck_assert(tfa_ptr_table_remove(&table, FIRST_BASE + 64 + i * 16, NULL));
	tfa_ptr_shard_t *b = tfa_ptr_shard_of(&table, FIRST_BASE + 2 * FIRST_REGION + 64);
	for (uint64_t i = 1; i < 300; i++)
		insert_ok(FIRST_BASE + 2 * FIRST_REGION + 64 + i * 16, i, 1000 + i);
	ck_assert_uint_gt(b->cap, TFA_PTR_CAP_STEP);
	ck_assert_uint_eq(a->cap, TFA_PTR_CAP_INITIAL);
	ck_assert_ptr_eq(a->slots, first);
	ck_assert(tfa_ptr_table_lookup(&table, FIRST_BASE + 64, NULL));
	ck_assert(tfa_ptr_table_lookup(&table, FIRST_BASE + 64 + 16, NULL));
	ck_assert(!tfa_ptr_table_lookup(&table, FIRST_BASE + 64 + 2 * 16, NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 64 + 1 + 299);
	/* Destroyed: nothing counted, the first slots empty; used again, only the new record. */
	tfa_ptr_table_destroy(&table);
	ck_assert_uint_eq(tfa_ptr_table_bytes(&table), 0);
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), base);
	for (uint64_t k = 0; k < TFA_PTR_CAP_INITIAL; k++)
		ck_assert_uint_eq(first[k].ptr, 0);
	insert_ok(FIRST_BASE + 4096, 1, 1);
	ck_assert_ptr_eq(a->slots, first);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);
}
END_TEST

START_TEST(test_ptr_table_destroy_and_reuse)
{
	for (uint64_t i = 0; i < 5000; i++)
		insert_ok(0x10000 + i * 64, i, i + 1);
	size_t mapped = tfa_arena_mapped_bytes();
	ck_assert_uint_gt(mapped, 0);
	tfa_ptr_table_destroy(&table);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	ck_assert_uint_lt(tfa_arena_mapped_bytes(), mapped);
	ck_assert(!tfa_ptr_table_lookup(&table, 0x10000, NULL));
	ck_assert(!tfa_ptr_table_recently_freed(&table, 0x10000));
	insert_ok(0x10000, 7, 7);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);
	ck_assert(tfa_ptr_table_lookup(&table, 0x10000, NULL));
}
END_TEST

/*
 * The owner of a shard (the registered thread that mapped it) claims and
 * frees its slots without a lock prefix while another thread frees its
 * blocks with compare-and-swap, as churn's hand-overs do; the first insert of
 * another thread makes the shard shared, and nothing is lost on the way.
 */
#define OWN_N 40000

static uintptr_t
own_ptr(uint64_t set, uint64_t i)
{
	/* Two sets interleaved in one 512 KiB region per 2048 blocks: the same shards. */
	return (uintptr_t)0x7c0000000000 + (uintptr_t)(i * 2 + set) * 128;
}

static pthread_barrier_t own_go;
static tfa_thread_rec_t *own_rec;

static void *
owner_worker(void *arg)
{
	(void)arg;
	own_rec = tfa_thread_rec();
	for (uint64_t i = 0; i < OWN_N; i++)
		insert_ok(own_ptr(0, i), i, i + 1);
	pthread_barrier_wait(&own_go);
	/* The other set, in and out and in again, while set 0 is freed by the other thread. */
	for (int round = 0; round < 4; round++) {
		for (uint64_t i = 0; i < OWN_N; i++) {
			tfa_record_t rec = make_rec(own_ptr(1, i), i, OWN_N + i + 1);
			if (tfa_ptr_table_insert(&table, &rec, NULL) != 0)
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
		}
		for (uint64_t i = 0; i < OWN_N; i += (round == 3 ? 2 : 1))
			if (!tfa_ptr_table_remove(&table, own_ptr(1, i), NULL))
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *
freeing_worker(void *arg)
{
	(void)arg;
	(void)tfa_thread_rec();
	pthread_barrier_wait(&own_go);
	for (uint64_t i = 0; i < OWN_N; i++) {
		tfa_record_t out;
		tfa_alloc_info_t info;
		bool found = tfa_ptr_table_remove(&table, own_ptr(0, i), &out);
		tfa_record_unpack(&out, &info);
		if (!found || info.requested != i || info.id != i + 1)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static uint64_t
owned_shards(const tfa_thread_rec_t *owner)
{
	uint64_t n = 0;

	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++)
		n += table.shards[k].slots != NULL && table.shards[k].owner == owner;
	return n;
}

START_TEST(test_ptr_table_owner_and_freeing_thread)
{
	pthread_t a, b;

	/* Threads from the start: the owner's inserts are not the single-threaded kind. */
	ck_assert_int_eq(pthread_barrier_init(&own_go, NULL, 2), 0);
	ck_assert_int_eq(pthread_create(&b, NULL, freeing_worker, NULL), 0);
	ck_assert_int_eq(pthread_create(&a, NULL, owner_worker, NULL), 0);
	ck_assert_int_eq(pthread_join(a, NULL), 0);
	ck_assert_int_eq(pthread_join(b, NULL), 0);
	ck_assert_uint_eq(mt_errors, 0);
	/* The freeing thread never inserted: the owner kept its shards. */
	ck_assert_uint_gt(owned_shards(own_rec), 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), OWN_N / 2);
	for (uint64_t i = 0; i < OWN_N; i++) {
		ck_assert(!tfa_ptr_table_lookup(&table, own_ptr(0, i), NULL));
		ck_assert(tfa_ptr_table_lookup(&table, own_ptr(1, i), NULL) == (i % 2 == 1));
	}
	/* A second free finds nothing. */
	ck_assert(!tfa_ptr_table_remove(&table, own_ptr(0, 7), NULL));
}
END_TEST

/*
 * The fast path's hold (tfa_ptr_fast_hold), access (tfa_ptr_fast_access_of)
 * and release (tfa_ptr_fast_release),
 * from a second thread: announced at depths 0 and 1, by the rebuild lock
 * deeper, exclusive while the thread forks (table_depth raised by
 * tfa_ptr_table_forking), each released back to where it started.  The
 * "basics" case runs it with announcements by exchange (the fast hold's
 * limit 0, every hold through tfa_ptr_fast_hold_slow), "asymmetric" with
 * plain stores.
 */
static uintptr_t hold_main_ptr;

static void *
fast_hold_worker(void *arg)
{
	(void)arg;
	tfa_thread_rec_t *r = tfa_thread_rec();
	uintptr_t mine = fake_ptr(1), other = fake_ptr(2), third = fake_ptr(3);

	/* Three shards: each hold below meets a shard of its own. */
	ck_assert_ptr_ne(tfa_ptr_shard_of(&table, mine), tfa_ptr_shard_of(&table, hold_main_ptr));
	ck_assert_ptr_ne(tfa_ptr_shard_of(&table, third), tfa_ptr_shard_of(&table, mine));
	ck_assert_ptr_ne(tfa_ptr_shard_of(&table, third), tfa_ptr_shard_of(&table, hold_main_ptr));
	insert_ok(mine, 16, 1); /* maps its shard: this thread owns it */
	ck_assert_uint_eq(tfa_tls.table_depth, 0);
	tfa_ptr_held_t h0 = tfa_ptr_fast_hold(&table, mine, r);
	ck_assert_int_eq(h0.mode, TFA_PTR_ANNOUNCED);
	ck_assert_ptr_eq(h0.rec, r);
	ck_assert_uint_eq(h0.depth, 0);
	ck_assert_ptr_eq(r->announce[0], h0.shard);
	ck_assert_int_eq(tfa_ptr_fast_access_of(h0, r), TFA_PTR_OWN);
	tfa_ptr_held_t h1 = tfa_ptr_fast_hold(&table, hold_main_ptr, r);
	ck_assert_int_eq(h1.mode, TFA_PTR_ANNOUNCED);
	ck_assert_uint_eq(h1.depth, 1);
	ck_assert_ptr_eq(r->announce[1], h1.shard);
	ck_assert_int_eq(tfa_ptr_fast_access_of(h1, r), TFA_PTR_FOREIGN);
	tfa_ptr_held_t h2 = tfa_ptr_fast_hold(&table, third, r);
	ck_assert_int_eq(h2.mode, TFA_PTR_LOCKED);
	ck_assert_uint_eq(tfa_tls.table_depth, TFA_ANNOUNCE_DEPTH);
	/* Held by its lock: what tfa_ptr_access says, the shard unowned (third is not mapped). */
	ck_assert_int_eq(tfa_ptr_fast_access_of(h2, r), TFA_PTR_SHARED);
	ck_assert_int_eq(tfa_ptr_fast_access_of(h2, r), tfa_ptr_access(h2));
	tfa_ptr_fast_release(h2, r);
	tfa_ptr_fast_release(h1, r);
	ck_assert_ptr_null(r->announce[1]);
	ck_assert_uint_eq(tfa_tls.table_depth, 1);
	/* Its own shard held by the lock (announcements full): foreign, as tfa_ptr_access says. */
	tfa_tls.table_depth = TFA_ANNOUNCE_DEPTH;
	tfa_ptr_held_t hl = tfa_ptr_fast_hold(&table, mine, r);
	ck_assert_int_eq(hl.mode, TFA_PTR_LOCKED);
	ck_assert_int_eq(tfa_ptr_fast_access_of(hl, r), TFA_PTR_FOREIGN);
	ck_assert_int_eq(tfa_ptr_fast_access_of(hl, r), tfa_ptr_access(hl));
	tfa_ptr_fast_release(hl, r);
	tfa_tls.table_depth = 1;
	tfa_ptr_fast_release(h0, r);
	ck_assert_ptr_null(r->announce[0]);
	ck_assert_uint_eq(tfa_tls.table_depth, 0);

	/* As the shim's prefork leaves the forking thread. */
	tfa_tls.holds_all_locks = 1;
	tfa_ptr_table_forking(true);
	tfa_ptr_held_t hf = tfa_ptr_fast_hold(&table, other, r);
	ck_assert_int_eq(hf.mode, TFA_PTR_EXCLUSIVE);
	ck_assert_ptr_null(r->announce[0]);
	ck_assert_int_eq(tfa_ptr_fast_access_of(hf, r), TFA_PTR_OWN);
	tfa_ptr_table_release(hf);
	tfa_ptr_table_forking(false);
	tfa_tls.holds_all_locks = 0;
	ck_assert_uint_eq(tfa_tls.table_depth, 0);
	tfa_ptr_held_t ha = tfa_ptr_fast_hold(&table, other, r);
	ck_assert_int_eq(ha.mode, TFA_PTR_ANNOUNCED);
	tfa_ptr_table_release(ha);
	ck_assert(tfa_ptr_table_remove(&table, mine, NULL));
	return NULL;
}

START_TEST(test_ptr_table_fast_hold)
{
	pthread_t a;

	(void)tfa_thread_rec();
	hold_main_ptr = fake_ptr(0);
	insert_ok(hold_main_ptr, 8, 1); /* this thread owns that shard */
	ck_assert_int_eq(pthread_create(&a, NULL, fast_hold_worker, NULL), 0);
	ck_assert_int_eq(pthread_join(a, NULL), 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);
}
END_TEST

static pthread_barrier_t own_hold;

/* Owns its shards and stays alive (a thread's record is reused once it exits). */
static void *
holding_owner(void *arg)
{
	(void)arg;
	own_rec = tfa_thread_rec();
	for (uint64_t i = 0; i < OWN_N; i++)
		insert_ok(own_ptr(0, i), i, i + 1);
	pthread_barrier_wait(&own_hold); /* inserted */
	pthread_barrier_wait(&own_hold); /* the other thread inserted */
	for (uint64_t i = 0; i < OWN_N; i += 2)
		if (!tfa_ptr_table_remove(&table, own_ptr(0, i), NULL))
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void *
inserting_worker(void *arg)
{
	(void)arg;
	ck_assert_ptr_ne(tfa_thread_rec(), own_rec);
	insert_ok(own_ptr(1, 3), 3, 4);
	return NULL;
}

START_TEST(test_ptr_table_other_insert_shares_shard)
{
	pthread_t a, b;

	ck_assert_int_eq(pthread_barrier_init(&own_hold, NULL, 2), 0);
	ck_assert_int_eq(pthread_create(&a, NULL, holding_owner, NULL), 0);
	pthread_barrier_wait(&own_hold);
	tfa_ptr_shard_t *s = tfa_ptr_shard_of(&table, own_ptr(1, 3));
	ck_assert_ptr_eq(s->owner, own_rec);
	ck_assert_int_eq(pthread_create(&b, NULL, inserting_worker, NULL), 0);
	ck_assert_int_eq(pthread_join(b, NULL), 0);
	ck_assert_ptr_null(s->owner);
	pthread_barrier_wait(&own_hold);
	ck_assert_int_eq(pthread_join(a, NULL), 0);
	ck_assert_uint_eq(mt_errors, 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), OWN_N / 2 + 1);
	ck_assert(tfa_ptr_table_lookup(&table, own_ptr(1, 3), NULL));
	for (uint64_t i = 0; i < OWN_N; i++)
		ck_assert(tfa_ptr_table_lookup(&table, own_ptr(0, i), NULL) == (i % 2 == 1));
}
END_TEST

/*
 * Shrinking under threads: the shards of a region its owner filled and
 * emptied (with one thread, or under ThreadSanitizer with its thread beside)
 * are shrunk by another thread's sweep (its own region grows) while a third
 * thread inserts and removes in them.
 */
#define SHRINK_N    (200000 / TSAN_SCALE)
#define SHRINK_OPS  (20000 / TSAN_SCALE)
#define SHRINK_A    ((uintptr_t)0x7a0000000000)
#define SHRINK_B    ((uintptr_t)0x790000000000)

static void *
shrink_grower(void *arg)
{
	(void)arg;
	(void)tfa_thread_rec();
	for (uint64_t i = 0; i < SHRINK_N; i++) {
		tfa_record_t rec = make_rec(SHRINK_B + i * 16, i, i + 1);
		if (tfa_ptr_table_insert(&table, &rec, NULL) != 0)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *
shrink_user(void *arg)
{
	tfa_record_t out;

	(void)arg;
	(void)tfa_thread_rec();
	/* A few blocks live at a time, spread over the emptied region. */
	for (uint64_t i = 0; i < SHRINK_OPS; i++) {
		uintptr_t p = SHRINK_A + (i * 7919 % SHRINK_N) * 16;
		tfa_record_t rec = make_rec(p, i, i + 1);
		if (tfa_ptr_table_insert(&table, &rec, NULL) != 0
		    || !tfa_ptr_table_lookup(&table, p, &out) || out.ptr != p)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
		if (i % 4 != 0 && !tfa_ptr_table_remove(&table, p, NULL))
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

START_TEST(test_ptr_table_threads_shrink)
{
	pthread_t a, b;

	/* A registered thread owns the shards it maps (under ThreadSanitizer it is not alone). */
	(void)tfa_thread_rec();
	for (uint64_t i = 0; i < SHRINK_N; i++)
		insert_ok(SHRINK_A + i * 16, i, i + 1);
	for (uint64_t i = 0; i < SHRINK_N; i++)
		ck_assert(tfa_ptr_table_remove(&table, SHRINK_A + i * 16, NULL));
	uint64_t emptied = tfa_ptr_table_bytes(&table);
	ck_assert_int_eq(pthread_create(&a, NULL, shrink_user, NULL), 0);
	ck_assert_int_eq(pthread_create(&b, NULL, shrink_grower, NULL), 0);
	ck_assert_int_eq(pthread_join(a, NULL), 0);
	ck_assert_int_eq(pthread_join(b, NULL), 0);
	ck_assert_uint_eq(mt_errors, 0);
	/* Region B took about what region A had, and A gave most of it back. */
	ck_assert_uint_lt(tfa_ptr_table_bytes(&table), emptied * 3 / 2);
	uint64_t live = 0;
	for (uint64_t i = 0; i < SHRINK_OPS; i++)
		live += i % 4 == 0;
	ck_assert_uint_eq(tfa_ptr_table_count(&table), SHRINK_N + live);
	for (uint64_t i = 0; i < SHRINK_N; i++)
		if (!tfa_ptr_table_lookup(&table, SHRINK_B + i * 16, NULL))
			ck_abort_msg("pointer %llu of region B lost", (unsigned long long)i);
	for (uint64_t i = 0; i < SHRINK_OPS; i++)
		ck_assert(tfa_ptr_table_lookup(&table, SHRINK_A + (i * 7919 % SHRINK_N) * 16, NULL)
			  == (i % 4 == 0));
}
END_TEST

/* Announcements as plain stores, the closers of gates issuing membarrier (when the kernel has it). */
static void
asym_setup(void)
{
	tfa_ptr_table_init_barriers();
}

/* ---- fork ---------------------------------------------------------------------------------- */

/*
 * A pointer of region r (64 KiB apart) whose shard differs from those of the
 * pointers in avoid[0..n): the cases below need shards of their own.
 */
static uintptr_t
ptr_in_own_shard(uintptr_t r, const uintptr_t *avoid, size_t n)
{
	for (;; r++) {
		uintptr_t p = (uintptr_t)0x600000000000 + (r << 16) + 0x40;
		bool clash = false;
		for (size_t i = 0; i < n; i++)
			clash |= tfa_ptr_shard_of(&table, p) == tfa_ptr_shard_of(&table, avoid[i]);
		if (!clash)
			return p;
	}
}

static uintptr_t fork_cold_ptr;
static int fork_done;

static void *
first_mapping_worker(void *arg)
{
	(void)arg;
	(void)tfa_thread_rec();
	insert_ok(fork_cold_ptr, 8, 2);
	__atomic_store_n(&fork_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *
cold_lookup_worker(void *arg)
{
	(void)tfa_thread_rec();
	return (void *)(uintptr_t)!tfa_ptr_table_lookup(&table, (uintptr_t)arg, NULL);
}

/*
 * prefork excludes the mapped shards and the first mapping of any other: an
 * insert into a shard never mapped waits for postfork, a lookup there does
 * not (its gate was not closed: prefork wrote no header of a shard never
 * mapped, whose page then stays untouched, and is not copied after fork).
 */
START_TEST(test_ptr_table_prefork_holds_first_mappings)
{
	uintptr_t mapped = ptr_in_own_shard(1, NULL, 0);
	uintptr_t avoid[2] = { mapped };
	fork_cold_ptr = ptr_in_own_shard(100, avoid, 1);
	avoid[1] = fork_cold_ptr;
	uintptr_t other_cold = ptr_in_own_shard(200, avoid, 2);
	pthread_t a, b;
	void *not_found = NULL;

	insert_ok(mapped, 8, 1);
	tfa_ptr_table_prefork(&table);
	ck_assert_int_eq(pthread_create(&a, NULL, first_mapping_worker, NULL), 0);
	ck_assert_int_eq(pthread_create(&b, NULL, cold_lookup_worker, (void *)other_cold), 0);
	ck_assert_int_eq(pthread_join(b, &not_found), 0);
	ck_assert_ptr_eq(not_found, (void *)1);
	ck_assert_uint_eq(tfa_ptr_shard_of(&table, other_cold)->gate, 0);
	struct timespec pause = { 0, 100 * 1000 * 1000 };
	nanosleep(&pause, NULL);
	ck_assert_int_eq(__atomic_load_n(&fork_done, __ATOMIC_ACQUIRE), 0);
	tfa_ptr_table_postfork_parent(&table);
	ck_assert_int_eq(pthread_join(a, NULL), 0);
	ck_assert_int_eq(fork_done, 1);
	ck_assert(tfa_ptr_table_lookup(&table, fork_cold_ptr, NULL));
	ck_assert(tfa_ptr_table_lookup(&table, mapped, NULL));
}
END_TEST

/*
 * The forking thread holds every lock, so it may map a shard meanwhile (an
 * atfork handler's allocation) whose first mapping another thread has begun
 * (excluded, waiting for the map lock): postfork gives back only prefork's
 * shards, and that thread finds the shard mapped and inserts into it.  (An
 * unlock of the shard another thread held let a third one in while that
 * thread mapped it again over 300 records: it spun for ever.)
 */
START_TEST(test_ptr_table_forking_thread_maps_a_shard)
{
	uintptr_t mapped = ptr_in_own_shard(1, NULL, 0);
	fork_cold_ptr = ptr_in_own_shard(400, &mapped, 1);
	pthread_t a;

	insert_ok(mapped, 8, 1);
	tfa_ptr_table_prefork(&table);
	ck_assert_int_eq(pthread_create(&a, NULL, first_mapping_worker, NULL), 0);
	struct timespec pause = { 0, 100 * 1000 * 1000 };
	nanosleep(&pause, NULL);
	tfa_tls.holds_all_locks = 1;
	for (uint64_t i = 1; i <= 300; i++)
		insert_ok(fork_cold_ptr + i * 16, 8, 10 + i);
	tfa_tls.holds_all_locks = 0;
	tfa_ptr_table_postfork_parent(&table);
	for (int i = 0; i < 1000 && !__atomic_load_n(&fork_done, __ATOMIC_ACQUIRE); i++) {
		struct timespec tick = { 0, 10 * 1000 * 1000 };
		nanosleep(&tick, NULL);
	}
	ck_assert_msg(__atomic_load_n(&fork_done, __ATOMIC_ACQUIRE), "the first mapper never ends");
	ck_assert_int_eq(pthread_join(a, NULL), 0);
	for (uint64_t i = 0; i <= 300; i++)
		ck_assert(tfa_ptr_table_lookup(&table, fork_cold_ptr + i * 16, NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 302);
}
END_TEST

static pthread_barrier_t cold_held, cold_release;

/* A thread without a record holds a shard never mapped by its lock (a lookup: it finds nothing). */
static void *
cold_holder(void *arg)
{
	tfa_ptr_held_t h = tfa_ptr_table_hold(&table, (uintptr_t)arg);

	ck_assert_int_eq(h.mode, TFA_PTR_LOCKED);
	pthread_barrier_wait(&cold_held);
	pthread_barrier_wait(&cold_release);
	tfa_ptr_table_release(h);
	return NULL;
}

/*
 * A fork while another thread holds a shard never mapped: prefork does not
 * wait for it, and the child resets that shard's lock, then maps the shard
 * and inserts there (it would wait forever for the parent's thread).
 */
START_TEST(test_ptr_table_fork_child_resets_cold_locks)
{
	uintptr_t mapped = ptr_in_own_shard(1, NULL, 0);
	uintptr_t cold = ptr_in_own_shard(300, &mapped, 1);
	pthread_t th;
	int status;

	insert_ok(mapped, 8, 1);
	ck_assert_int_eq(pthread_barrier_init(&cold_held, NULL, 2), 0);
	ck_assert_int_eq(pthread_barrier_init(&cold_release, NULL, 2), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, cold_holder, (void *)cold), 0);
	pthread_barrier_wait(&cold_held);
	tfa_ptr_table_prefork(&table);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		tfa_ptr_table_postfork_child(&table);
		tfa_record_t rec = make_rec(cold, 8, 2);
		bool ok = tfa_ptr_table_insert(&table, &rec, NULL) == 0 && tfa_ptr_table_lookup(&table, cold, NULL)
			  && tfa_ptr_table_lookup(&table, mapped, NULL);
		_exit(ok ? 0 : 1);
	}
	tfa_ptr_table_postfork_parent(&table);
	pthread_barrier_wait(&cold_release);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	/* The child's insert ends at once, or never: 10 s is a hang. */
	for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++) {
		struct timespec pause = { 0, 10 * 1000 * 1000 };
		nanosleep(&pause, NULL);
	}
	if (waitpid(pid, &status, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		(void)waitpid(pid, &status, 0);
		ck_abort_msg("the fork child hangs on the lock the parent's thread held");
	}
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

static Suite *
ptr_table_suite(void)
{
	Suite *s = suite_create("ptr_table");
	TCase *tc;

	tc = tcase_create("basics");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_ptr_table_insert_lookup_remove);
	tcase_add_test(tc, test_ptr_table_duplicate_insert);
	tcase_add_test(tc, test_ptr_table_recently_freed);
	tcase_add_test(tc, test_ptr_table_foreach_visits_each_once);
	tcase_add_test(tc, test_ptr_table_first_slots);
	tcase_add_test(tc, test_ptr_table_destroy_and_reuse);
	tcase_add_test(tc, test_ptr_table_arena_exhausted);
	tcase_add_test(tc, test_ptr_table_fast_hold);
	suite_add_tcase(s, tc);

	tc = tcase_create("records");
	tcase_add_test(tc, test_ptr_table_record_pack_limits);
	tcase_add_test(tc, test_ptr_table_record_fields_isolated);
	suite_add_tcase(s, tc);

	tc = tcase_create("scale");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_ptr_table_million_pointers);
	tcase_add_test(tc, test_ptr_table_bytes_per_block);
	tcase_add_loop_test(tc, test_ptr_table_shrinks_behind_a_moving_heap, 0, 2);
	tcase_add_loop_test(tc, test_ptr_table_random_removal, 0, 2);
	tcase_add_test(tc, test_ptr_table_churn);
	tcase_add_test(tc, test_ptr_table_threads);
	tcase_add_test(tc, test_ptr_table_threads_share_shards);
	tcase_add_test(tc, test_ptr_table_remove_race);
	tcase_add_test(tc, test_ptr_table_owner_and_freeing_thread);
	tcase_add_test(tc, test_ptr_table_other_insert_shares_shard);
	tcase_add_test(tc, test_ptr_table_threads_shrink);
	tcase_add_test(tc, test_ptr_table_stale_dropped_by_rebuild);
	tcase_add_test(tc, test_ptr_table_tombstone_tells_double_free);
	suite_add_tcase(s, tc);

	/* The threaded cases again, with the asymmetric announcements the shim uses. */
	tc = tcase_create("asymmetric");
	tcase_add_checked_fixture(tc, asym_setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_ptr_table_threads);
	tcase_add_test(tc, test_ptr_table_threads_share_shards);
	tcase_add_test(tc, test_ptr_table_remove_race);
	tcase_add_test(tc, test_ptr_table_owner_and_freeing_thread);
	tcase_add_test(tc, test_ptr_table_other_insert_shares_shard);
	tcase_add_test(tc, test_ptr_table_threads_shrink);
	tcase_add_test(tc, test_ptr_table_fast_hold);
	suite_add_tcase(s, tc);

	tc = tcase_create("fork");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_ptr_table_prefork_holds_first_mappings);
	tcase_add_test(tc, test_ptr_table_fork_child_resets_cold_locks);
	suite_add_tcase(s, tc);

	/*
	 * Not under ThreadSanitizer (its list names "fork" only): the forking
	 * thread holds every lock and so writes, without taking any, what the
	 * other thread read before it blocked on the map lock; it reads again
	 * under that lock, but no lock orders the first reads for TSan.
	 */
	tc = tcase_create("fork_holder");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_ptr_table_forking_thread_maps_a_shard);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(ptr_table_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
