/* SPDX-License-Identifier: MIT */
#include "core/devices.h"

#include <errno.h>
#include <string.h>

#include "core/lock.h"
#include "core/log.h"
#include "core/options.h"
#include "core/profile_format.h"
#include "core/profile_write.h"
#include "core/sites.h"
#include "core/timeline.h"
#include "registry/registry.h"

static tfa_ptr_table_t device_table;
static tfa_tracking_allocator_t trackers[TFA_DEVCODES];
static tfa_sites_t device_sites[TFA_DEVCODES];
static uint8_t ready[TFA_DEVCODES];
static int64_t limits[TFA_DEVCODES];
static tfa_lock_t devices_lock = TFA_LOCK_INIT;
static tfa_timeline_t timelines[TFA_DEVCODES];
static tfa_lock_t timeline_locks[TFA_DEVCODES];
static uint64_t time_origin;

#define DEVICE_TIMELINE_INTERVAL_NS 10000000u /* 10 ms, as the cpu's */
#define TIMELINE_POINT_BYTES        36u

/*
 * The backend the trackers name: the memory is made by the API's own call
 * (cuda_hooks/), so the tracker never asks it for any.
 */
static void *
external_allocate(tfa_allocator_t *self, size_t alignment, size_t nbytes,
		  const tfa_allocation_attrs_t *attrs)
{
	(void)self;
	(void)alignment;
	(void)nbytes;
	(void)attrs;
	return NULL;
}

static void
external_deallocate(tfa_allocator_t *self, void *ptr)
{
	(void)self;
	(void)ptr;
}

static const tfa_allocator_ops_t external_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "cuda",
	.allocate_raw = external_allocate,
	.deallocate_raw = external_deallocate,
};

static tfa_allocator_t external_backend = {
	.ops = &external_ops,
	.device = TFA_DEVICE_CUDA,
	.device_ordinal = -1,
	.backend_id = TFA_BACKEND_CUDA,
};

static const char *const devcode_names[TFA_DEVCODES] = {
	"cpu", "cuda_host", "cuda_managed", "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7", "cuda:8", "cuda:9", "cuda:10", "cuda:11", "cuda:12", "cuda:13", "cuda:14", "cuda:15", "cuda:16", "cuda:17", "cuda:18", "cuda:19", "cuda:20", "cuda:21", "cuda:22", "cuda:23", "cuda:24", "cuda:25", "cuda:26", "cuda:27", "cuda:28"
};

const char *
tfa_devcode_name(unsigned code)
{
	return code < TFA_DEVCODES ? devcode_names[code] : "unknown";
}

int
tfa_devcode_parse(const char *name, unsigned *code)
{
	if (name == NULL)
		return -ENOENT;
	if (strcmp(name, "cpu") == 0) {
		*code = TFA_DEVCODE_CPU;
		return 0;
	}
	if (strcmp(name, "cuda_host") == 0) {
		*code = TFA_DEVCODE_CUDA_HOST;
		return 0;
	}
	if (strcmp(name, "cuda_managed") == 0) {
		*code = TFA_DEVCODE_CUDA_MANAGED;
		return 0;
	}
	if (strncmp(name, "cuda:", 5) == 0 && name[5] >= '0' && name[5] <= '9') {
		unsigned n = 0;
		const char *p = name + 5;
		for (; *p >= '0' && *p <= '9' && n < 1000; p++)
			n = n * 10 + (unsigned)(*p - '0');
		if (*p == '\0' && (p - name) <= 7 && !(name[5] == '0' && p - name > 6)
		    && n < TFA_CUDA_ORDINALS) {
			*code = TFA_DEVCODE_CUDA0 + n;
			return 0;
		}
	}
	return -ENOENT;
}

static void
stale_record(void *arg, const tfa_record_t *rec)
{
	unsigned code = (unsigned)(rec->size_meta >> 53) & 31;

	(void)arg;
	if (code < TFA_DEVCODES && __atomic_load_n(&ready[code], __ATOMIC_ACQUIRE))
		tfa_tracking_insert_failed(&trackers[code], 1, rec);
}

tfa_tracking_allocator_t *
tfa_device_tracker(unsigned code)
{
	if (code == TFA_DEVCODE_CPU || code >= TFA_DEVCODES)
		return NULL;
	if (tfa_likely(__atomic_load_n(&ready[code], __ATOMIC_ACQUIRE)))
		return &trackers[code];
	tfa_lock(&devices_lock);
	if (!ready[code]) {
		tfa_tracking_allocator_t *ta = &trackers[code];
		if (tfa_tracking_allocator_init(ta, &external_backend, &device_table, false) == 0) {
			ta->device_code = (uint8_t)code;
			ta->wrapper.base.device = code >= TFA_DEVCODE_CUDA0 ? TFA_DEVICE_CUDA : TFA_DEVICE_CPU;
			ta->wrapper.base.device_ordinal = code >= TFA_DEVCODE_CUDA0 ? (int)(code - TFA_DEVCODE_CUDA0) : -1;
			ta->sites = &device_sites[code];
			tfa_ptr_table_set_stale_hook(&device_table, stale_record, NULL);
			if (limits[code] > 0)
				tfa_tracking_allocator_set_bytes_limit(ta, limits[code]);
			uint64_t origin = __atomic_load_n(&time_origin, __ATOMIC_RELAXED);
			uint64_t now = tfa_monotonic_ns();
			tfa_timeline_init(&timelines[code], origin != 0 && origin <= now ? origin : now,
					  DEVICE_TIMELINE_INTERVAL_NS);
			/* The series starts from nothing in use, when the device was first used. */
			tfa_timeline_add(&timelines[code], now, 0, 0, 0, 0, 0, true);
			__atomic_store_n(&ready[code], 1, __ATOMIC_RELEASE);
		}
	}
	tfa_unlock(&devices_lock);
	return __atomic_load_n(&ready[code], __ATOMIC_ACQUIRE) ? &trackers[code] : NULL;
}

tfa_tracking_allocator_t *
tfa_device_tracker_if_used(unsigned code)
{
	if (code == TFA_DEVCODE_CPU || code >= TFA_DEVCODES)
		return NULL;
	return __atomic_load_n(&ready[code], __ATOMIC_ACQUIRE) ? &trackers[code] : NULL;
}

tfa_ptr_table_t *
tfa_devices_table(void)
{
	return &device_table;
}

tfa_sites_t *
tfa_device_sites(unsigned code)
{
	return code < TFA_DEVCODES ? &device_sites[code] : NULL;
}

int
tfa_devices_set_limits(const char *spec)
{
	int64_t want[TFA_DEVCODES];
	char item[64];

	memset(want, 0, sizeof(want));
	if (spec == NULL)
		return 0;
	for (const char *p = spec; *p != '\0';) {
		const char *end = strchr(p, ',');
		size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
		if (n == 0 || n >= sizeof(item))
			return -EINVAL;
		memcpy(item, p, n);
		item[n] = '\0';
		char *colon = strchr(item, ':');
		if (colon == NULL)
			return -EINVAL;
		*colon = '\0';
		unsigned code;
		uint64_t ord, bytes;
		if (strcmp(item, "host") == 0)
			code = TFA_DEVCODE_CUDA_HOST;
		else if (strcmp(item, "managed") == 0)
			code = TFA_DEVCODE_CUDA_MANAGED;
		else if (tfa_parse_uint(item, &ord) == 0 && ord < TFA_CUDA_ORDINALS)
			code = TFA_DEVCODE_CUDA0 + (unsigned)ord;
		else
			return -EINVAL;
		if (tfa_parse_size(colon + 1, &bytes) != 0 || bytes > (uint64_t)INT64_MAX)
			return -EINVAL;
		want[code] = (int64_t)bytes;
		p += n;
		if (*p == ',' && *++p == '\0')
			return -EINVAL; /* a trailing comma */
	}
	tfa_lock(&devices_lock);
	for (unsigned c = 1; c < TFA_DEVCODES; c++) {
		limits[c] = want[c];
		if (ready[c])
			tfa_tracking_allocator_set_bytes_limit(&trackers[c], want[c]);
	}
	tfa_unlock(&devices_lock);
	return 0;
}

void
tfa_devices_set_time_origin(uint64_t origin_ns)
{
	__atomic_store_n(&time_origin, origin_ns, __ATOMIC_RELAXED);
	/* A fork child: each device's series starts again, from what it inherited. */
	for (unsigned c = 1; c < TFA_DEVCODES; c++) {
		if (!__atomic_load_n(&ready[c], __ATOMIC_ACQUIRE))
			continue;
		tfa_lock(&timeline_locks[c]);
		tfa_timeline_init(&timelines[c], origin_ns, DEVICE_TIMELINE_INTERVAL_NS);
		tfa_unlock(&timeline_locks[c]);
		tfa_device_sample(c, true);
	}
}

void
tfa_device_sample(unsigned code, bool force)
{
	tfa_allocator_stats_t st;
	tfa_tracking_allocator_t *ta = tfa_device_tracker_if_used(code);

	if (ta == NULL || !tfa_trylock(&timeline_locks[code]))
		return;
	uint64_t now = tfa_monotonic_ns();
	if (force || tfa_timeline_due(&timelines[code], now)) {
		tfa_tracking_allocator_get_stats(ta, &st);
		tfa_timeline_add(&timelines[code], now, (uint64_t)st.bytes_in_use,
				 (uint64_t)st.allocated_bytes_in_use, 0, (uint64_t)st.peak_bytes_in_use,
				 (uint64_t)st.peak_allocated_bytes_in_use, force);
	}
	tfa_unlock(&timeline_locks[code]);
}

void
tfa_devices_write_timelines(struct tfa_pw_s *w)
{
	for (unsigned i = 0; i + 1 < TFA_DEVCODES; i++) {
		unsigned c = tfa_devcode_at(i);
		tfa_tracking_allocator_t *ta = tfa_device_tracker_if_used(c);
		tfa_allocator_stats_t st;
		if (ta == NULL)
			continue;
		tfa_tracking_allocator_get_stats(ta, &st);
		tfa_lock(&timeline_locks[c]);
		tfa_timeline_t *tl = &timelines[c];
		tfa_timeline_add(tl, tfa_monotonic_ns(), (uint64_t)st.bytes_in_use,
				 (uint64_t)st.allocated_bytes_in_use, 0, (uint64_t)st.peak_bytes_in_use,
				 (uint64_t)st.peak_allocated_bytes_in_use, true);
		for (size_t k = 0; k < tl->n;) {
			tfa_pw_begin(w, TFA_REC_DEVICE_TIMELINE);
			tfa_pw_str(w, tfa_devcode_name(c));
			tfa_pw_u64(w, tl->interval_ns);
			for (; k < tl->n && tfa_pw_room(w) >= TIMELINE_POINT_BYTES; k++) {
				const tfa_timeline_point_t *p = &tl->pts[k];
				tfa_pw_u64(w, p->t_ns);
				tfa_pw_u64(w, p->bytes_in_use);
				tfa_pw_u64(w, p->allocated_bytes);
				tfa_pw_u64(w, p->rss_bytes);
				tfa_pw_u32(w, p->flags);
			}
			tfa_pw_end(w);
		}
		tfa_unlock(&timeline_locks[c]);
	}
}

void
tfa_devices_prefork(void)
{
	/* The table first: a thread holding a shard may still take a tracker's lock. */
	tfa_lock(&devices_lock);
	for (unsigned c = 1; c < TFA_DEVCODES; c++)
		tfa_lock(&timeline_locks[c]);
	tfa_ptr_table_prefork(&device_table);
	for (unsigned c = 1; c < TFA_DEVCODES; c++)
		if (ready[c])
			tfa_lock(&trackers[c].shared_lock);
}

void
tfa_devices_postfork_parent(void)
{
	for (unsigned c = TFA_DEVCODES - 1; c >= 1; c--)
		if (ready[c])
			tfa_unlock(&trackers[c].shared_lock);
	tfa_ptr_table_postfork_parent(&device_table);
	for (unsigned c = 1; c < TFA_DEVCODES; c++)
		tfa_unlock(&timeline_locks[c]);
	tfa_unlock(&devices_lock);
}

void
tfa_devices_postfork_child(void)
{
	for (unsigned c = 1; c < TFA_DEVCODES; c++)
		if (ready[c])
			tfa_lock_init(&trackers[c].shared_lock);
	tfa_ptr_table_postfork_child(&device_table);
	for (unsigned c = 1; c < TFA_DEVCODES; c++)
		tfa_lock_init(&timeline_locks[c]);
	tfa_lock_init(&devices_lock);
}
