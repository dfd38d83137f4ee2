/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target of the profile reader (core/profile_read.c).
 *
 * The input is parsed as a whole profile file.  A parse that fails must leave
 * the profile zeroed and a one-line message naming the file.  A parse that
 * succeeds must hold what the reader promises (core/profile_read.h) and is
 * read the way `tfalloc report` reads it: every string, every stack of every
 * leak, error, site and cleanup group through tfa_profile_stack and the
 * module of each of its addresses, every resource through
 * tfa_profile_resource and its leaks, the error sums, the timelines.
 * AddressSanitizer catches any read out of the reader's arrays.
 *
 * Mutated records almost never keep a right CRC-32, which would stop the
 * fuzzer at the reader's first check: each input is parsed as is, then once
 * more with the CRC of every record it can delimit recomputed.
 *
 * The memory the reader holds at once while parsing is measured through the
 * sanitizer's malloc hooks: it must stay within a small multiple of the
 * input's size (core/profile_read.h), MEM_FACTOR times plus MEM_SLACK.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/allocator_interface.h>

#include "core/profile_read.h"

#define MEM_FACTOR 64u
#define MEM_SLACK  ((size_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static int measuring;
static size_t live_bytes, peak_bytes;

static void
on_malloc(const volatile void *ptr, size_t size)
{
	(void)ptr;
	if (!measuring)
		return;
	live_bytes += size;
	if (live_bytes > peak_bytes)
		peak_bytes = live_bytes;
}

static void
on_free(const volatile void *ptr)
{
	size_t size;

	if (!measuring || ptr == NULL)
		return;
	size = __sanitizer_get_allocated_size(ptr);
	live_bytes = live_bytes > size ? live_bytes - size : 0;
}

static void
touch_str(const char *s)
{
	if (s == NULL)
		abort();
	sink += strlen(s);
}

static void
touch_stack(const tfa_profile_t *p, uint32_t id)
{
	uint32_t depth;
	const uint64_t *pcs = tfa_profile_stack(p, id, &depth);

	if (pcs == NULL) {
		if (depth != 0)
			abort();
		return;
	}
	for (uint32_t i = 0; i < depth; i++) {
		const tfa_profile_module_t *m = tfa_profile_module_at(p, id, pcs[i]);
		sink += pcs[i];
		if (m != NULL)
			touch_str(m->path);
	}
}

static void
touch_resource(const tfa_profile_t *p, uint32_t tag)
{
	const tfa_profile_resource_t *r = tfa_profile_resource(p, tag);
	uint64_t bytes, blocks;

	tfa_profile_resource_leaks(p, tag, &bytes, &blocks);
	sink += bytes + blocks;
	if (r == NULL)
		return;
	if (r->tag != tag)
		abort();
	touch_str(r->container);
	touch_str(r->type);
	touch_str(r->name);
	touch_str(r->debug);
	touch_str(tfa_prof_resource_state_name(r->state));
	if (r->first > p->nres_devices || r->ndevices > p->nres_devices - r->first)
		abort();
	for (size_t i = 0; i < r->ndevices; i++) {
		touch_str(p->res_devices[r->first + i].device);
		sink += p->res_devices[r->first + i].f[0];
	}
}

static void
walk(const tfa_profile_t *p)
{
	uint64_t sums[TFA_ERRC_FIELD_COUNT];

	if (!p->has_process || !p->has_end)
		abort();
	touch_str(p->path);
	touch_str(p->command);
	touch_str(p->exe);
	touch_str(p->comm);
	touch_str(p->tfalloc_version);
	/* The names the reports print for the file's enumerations. */
	touch_str(tfa_prof_end_reason_name(p->end_reason));
	touch_str(tfa_prof_stacks_mode_name(p->stacks_mode));
	for (unsigned k = 0; k <= TFA_ERRC_FIELD_COUNT; k++)
		touch_str(tfa_prof_error_count_name(k));
	for (size_t i = 0; i < p->ndevices; i++) {
		touch_str(p->devices[i].name);
		touch_str(p->devices[i].allocator);
	}
	for (size_t i = 0; i < p->nmodules; i++) {
		const tfa_profile_module_t *m = &p->modules[i];
		touch_str(m->path);
		for (uint32_t j = 0; j < m->build_id_len; j++)
			sink += m->build_id[j];
	}
	for (size_t i = 0; i < p->nstacks; i++) {
		if (i > 0 && p->stacks[i - 1].id >= p->stacks[i].id)
			abort();
		if (p->stacks[i].first > p->npcs || p->stacks[i].depth > p->npcs - p->stacks[i].first)
			abort();
		touch_stack(p, p->stacks[i].id);
	}
	for (size_t i = 0; i < p->nleaks; i++) {
		touch_str(p->leaks[i].device);
		touch_str(tfa_prof_leak_kind_name(p->leaks[i].kind));
		touch_stack(p, p->leaks[i].stack_id);
		touch_resource(p, (uint32_t)p->leaks[i].f[TFA_LEAKF_RESOURCE]);
	}
	for (size_t i = 0; i < p->nerrors; i++) {
		touch_str(p->errors[i].detail);
		touch_str(tfa_prof_error_kind_name(p->errors[i].kind));
		touch_stack(p, p->errors[i].stack_id);
		touch_stack(p, p->errors[i].alloc_stack_id);
	}
	sink += tfa_profile_error_sums(p, sums);
	for (size_t i = 0; i < p->nsites; i++) {
		touch_str(p->sites[i].device);
		touch_stack(p, p->sites[i].stack_id);
	}
	for (size_t i = 0; i < p->nresources; i++) {
		if (i > 0 && p->resources[i - 1].tag >= p->resources[i].tag)
			abort();
		touch_resource(p, p->resources[i].tag);
	}
	for (size_t i = 0; i < p->ncleanups; i++) {
		const tfa_profile_cleanup_t *c = &p->cleanups[i];
		touch_str(c->container);
		if (c->first > p->ncleanup_groups || c->ngroups > p->ncleanup_groups - c->first)
			abort();
		for (size_t j = 0; j < c->ngroups; j++) {
			const tfa_profile_cleanup_group_t *g = &p->cleanup_groups[c->first + j];
			touch_stack(p, g->stack_id);
			touch_resource(p, g->tag);
		}
	}
	for (size_t i = 0; i < p->ntimeline; i++)
		sink += p->timeline[i].bytes_in_use;
	for (size_t i = 0; i < p->ndev_timelines; i++) {
		const tfa_profile_dev_timeline_t *t = &p->dev_timelines[i];
		touch_str(t->device);
		if (t->first > p->ndev_points || t->n > p->ndev_points - t->first)
			abort();
		for (size_t j = 0; j < t->n; j++)
			sink += p->dev_points[t->first + j].bytes_in_use;
	}
	/* Ids no record names. */
	touch_stack(p, 0);
	touch_stack(p, UINT32_MAX);
	touch_resource(p, 0);
	touch_resource(p, UINT32_MAX);
}

/* A copy of data with every record's CRC-32 made right, or NULL when none changed. */
static uint8_t *
fix_crcs(const uint8_t *data, size_t size)
{
	uint8_t *copy = NULL;
	size_t off = TFA_PROF_HEADER_SIZE;

	while (off + 8 <= size) {
		uint32_t len, crc, want;

		memcpy(&len, data + off + 4, 4);
		if (len > size - off - 8 || size - off - 8 - len < 4)
			break;
		want = tfa_crc32(0, data + off, 8 + (size_t)len);
		memcpy(&crc, data + off + 8 + len, 4);
		if (crc != want) {
			if (copy == NULL) {
				copy = malloc(size);
				if (copy == NULL)
					abort();
				memcpy(copy, data, size);
			}
			memcpy(copy + off + 8 + len, &want, 4);
		}
		off += 8 + (size_t)len + 4;
	}
	return copy;
}

static void
parse_one(const uint8_t *data, size_t size)
{
	tfa_profile_t p;
	char err[512];
	static const tfa_profile_t zero;

	err[0] = '\0';
	live_bytes = peak_bytes = 0;
	measuring = 1;
	int rc = tfa_profile_parse(data, size, "fuzz.tfaprof", &p, err, sizeof(err));
	measuring = 0;
	if (peak_bytes > MEM_FACTOR * size + MEM_SLACK)
		abort();
	if (rc == 0) {
		walk(&p);
		tfa_profile_free(&p);
		if (memcmp(&p, &zero, sizeof(p)) != 0)
			abort();
	} else {
		if (memcmp(&p, &zero, sizeof(p)) != 0)
			abort();
		if (strncmp(err, "fuzz.tfaprof: ", 14) != 0 || strchr(err, '\n') != NULL)
			abort();
		tfa_profile_free(&p);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int hooked;
	uint8_t *fixed;

	if (!hooked) {
		__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
		hooked = 1;
	}
	parse_one(data, size);
	fixed = fix_crcs(data, size);
	if (fixed != NULL) {
		parse_one(fixed, size);
		free(fixed);
	}
	return 0;
}
