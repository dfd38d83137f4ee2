/* SPDX-License-Identifier: MIT */
#include "core/control.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/devices.h"
#include "core/lock.h"
#include "core/log.h"
#include "core/profile_format.h"
#include "core/resource_mgr.h"
#include "core/shim.h"
#include "core/thread.h"
#include "preload/tfalloc.h"

#define SCOPE_DEPTH      64
#define THREADS_CONTAINER "threads"
#define THREAD_TYPE      "thread"

/* Error codes of the two headers are one set. */
_Static_assert((int)TFA_RES_ENOTACTIVE == (int)TFALLOC_ENOTACTIVE && (int)TFA_RES_EINVAL == (int)TFALLOC_EINVAL
		       && (int)TFA_RES_ENAMETOOLONG == (int)TFALLOC_ENAMETOOLONG && (int)TFA_RES_ENOENT == (int)TFALLOC_ENOENT
		       && (int)TFA_RES_EEXIST == (int)TFALLOC_EEXIST && (int)TFA_RES_ESCOPE == (int)TFALLOC_ESCOPE
		       && (int)TFA_RES_ENOMEM == (int)TFALLOC_ENOMEM && (int)TFA_RES_EIO == (int)TFALLOC_EIO,
	       "error codes of core/resource_mgr.h and preload/tfalloc.h differ");
_Static_assert(TFALLOC_NAME_MAX == TFA_RES_NAME_MAX && TFALLOC_DEBUG_MAX == TFA_RES_DEBUG_MAX,
	       "name limits of core/resource_mgr.h and preload/tfalloc.h differ");

/* The thread's scopes: the tags they replaced, innermost last. */
static TFA_TLS struct {
	uint32_t depth;
	uint32_t thread_tag;  /* --tag-by thread: the tag of the thread's name */
	uint32_t names_seen;  /* names_generation when the thread last looked at its name */
	uint32_t saved[SCOPE_DEPTH];
} scopes;

bool tfa_control_tag_by_thread;
static uint32_t names_generation = 1;

/* ---- cleanups kept for the profile --------------------------------------------------------- */

#define CLEANUPS_MAX       256
#define CLEANUP_GROUPS_MAX 64

struct cleanup_group {
	uint32_t tag;
	uint32_t stack_id;
	uint64_t blocks;
	uint64_t bytes;
	uint64_t sample;
};

struct cleanup {
	uint64_t t_ns; /* CLOCK_REALTIME */
	uint64_t counts[TFA_CLEANF_FIELD_COUNT];
	uint32_t ngroups;
	char container[TFA_RES_NAME_MAX + 1];
	struct cleanup_group groups[CLEANUP_GROUPS_MAX];
};

static tfa_lock_t cleanups_lock = TFA_LOCK_INIT;
static struct cleanup *cleanups; /* CLEANUPS_MAX, mapped on the first leaky cleanup */
static uint32_t ncleanups;       /* complete entries: the writer reads up to here */
static uint64_t cleanups_dropped;

/* ---- handles ------------------------------------------------------------------------------- */

static int
fill_handle(uint32_t tag, tfalloc_resource_handle_t *out)
{
	tfa_res_info_t info;
	int err = tfa_res_info(tag, &info);

	if (out == NULL || err != 0)
		return err;
	memset(out, 0, sizeof(*out));
	out->id = tag;
	out->hash_code = info.type_hash;
	memcpy(out->device, "cpu", 4);
	memcpy(out->container, info.container, sizeof(out->container));
	memcpy(out->name, info.name, sizeof(out->name));
	memcpy(out->maybe_type_name, info.type_name, sizeof(out->maybe_type_name));
	return TFALLOC_OK;
}

/*
 * The tag a handle names: its id, when the resource with that id has the
 * handle's container, name and type hash (a handle from another process or
 * run names nothing here).
 */
static int
handle_tag(const tfalloc_resource_handle_t *h, uint32_t *tag)
{
	tfa_res_info_t info;

	if (h == NULL)
		return TFALLOC_EINVAL;
	if (tfa_res_info(h->id, &info) != 0)
		return TFALLOC_ENOENT;
	if (strncmp(info.container, h->container, sizeof(h->container)) != 0
	    || strncmp(info.name, h->name, sizeof(h->name)) != 0 || info.type_hash != h->hash_code)
		return TFALLOC_ENOENT;
	*tag = h->id;
	return TFALLOC_OK;
}

/*
 * The device code of a device the process has: cpu, and the CUDA devices
 * (core/devices.h: cuda_host, cuda_managed, cuda:N) it allocated on.
 * ENOENT for any other name, a CUDA device never used included.
 */
static int
device_code(const char *device, unsigned *code)
{
	if (device == NULL)
		return TFALLOC_EINVAL;
	if (tfa_devcode_parse(device, code) != 0)
		return TFALLOC_ENOENT;
	if (*code != TFA_DEVCODE_CPU && tfa_device_tracker_if_used(*code) == NULL)
		return TFALLOC_ENOENT;
	return TFALLOC_OK;
}

/* ---- scopes -------------------------------------------------------------------------------- */

/* Makes tag (a reference already taken for the scope) current. */
static int
push_scope(uint32_t tag)
{
	if (scopes.depth >= SCOPE_DEPTH) {
		tfa_res_unref(tag);
		return TFALLOC_ESCOPE;
	}
	scopes.saved[scopes.depth++] = tfa_tls.tag;
	tfa_tls.tag = tag;
	return TFALLOC_OK;
}

static int
api_scope_enter(const char *container, const char *name)
{
	uint32_t tag;
	int err;

	if (scopes.depth >= SCOPE_DEPTH)
		return TFALLOC_ESCOPE;
	tfa_shim_call_begin();
	err = tfa_res_lookup_or_create(container, TFA_RES_SCOPE_TYPE, name, NULL, &tag, NULL);
	if (err == 0)
		err = push_scope(tag);
	tfa_shim_call_end();
	return err;
}

static int
api_scope_enter_handle(const tfalloc_resource_handle_t *h)
{
	uint32_t tag;
	int err = handle_tag(h, &tag);

	if (err != 0)
		return err;
	tfa_shim_call_begin();
	err = tfa_res_ref(tag);
	if (err == 0)
		err = push_scope(tag);
	tfa_shim_call_end();
	return err;
}

static int
api_scope_exit(void)
{
	if (scopes.depth == 0)
		return TFALLOC_ESCOPE;
	tfa_shim_call_begin();
	uint32_t tag = tfa_tls.tag;
	tfa_tls.tag = scopes.saved[--scopes.depth];
	tfa_res_unref(tag);
	tfa_shim_call_end();
	return TFALLOC_OK;
}

/* ---- resources ----------------------------------------------------------------------------- */

static int
api_resource_create(const char *container, const char *type, const char *name, const char *debug,
		    tfalloc_resource_handle_t *out)
{
	uint32_t tag;

	tfa_shim_call_begin();
	int err = tfa_res_create(container, type, name, debug, &tag);
	if (err == 0)
		err = fill_handle(tag, out);
	tfa_shim_call_end();
	return err;
}

static int
api_resource_lookup(const char *container, const char *type, const char *name,
		    tfalloc_resource_handle_t *out)
{
	uint32_t tag;

	tfa_shim_call_begin();
	int err = tfa_res_lookup(container, type, name, &tag);
	if (err == 0)
		err = fill_handle(tag, out);
	tfa_shim_call_end();
	return err;
}

static int
api_resource_lookup_or_create(const char *container, const char *type, const char *name,
			      const char *debug, tfalloc_resource_handle_t *out, int *created)
{
	uint32_t tag;
	bool made = false;

	tfa_shim_call_begin();
	int err = tfa_res_lookup_or_create(container, type, name, debug, &tag, &made);
	if (err == 0)
		err = fill_handle(tag, out);
	tfa_shim_call_end();
	if (err == 0 && created != NULL)
		*created = made;
	return err;
}

static int
api_resource_unref(const tfalloc_resource_handle_t *h)
{
	uint32_t tag;
	int err = handle_tag(h, &tag);

	if (err != 0)
		return err;
	tfa_shim_call_begin();
	err = tfa_res_unref(tag);
	tfa_shim_call_end();
	return err;
}

static int
api_resource_delete(const char *container, const char *type, const char *name)
{
	tfa_shim_call_begin();
	int err = tfa_res_delete(container, type, name);
	tfa_shim_call_end();
	return err;
}

static int
api_resource_delete_handle(const tfalloc_resource_handle_t *h)
{
	uint32_t tag;
	int err = handle_tag(h, &tag);

	if (err != 0)
		return err;
	tfa_shim_call_begin();
	err = tfa_res_delete_tag(tag);
	tfa_shim_call_end();
	return err;
}

static int
api_resource_info(const tfalloc_resource_handle_t *h, tfalloc_resource_info_t *out)
{
	tfa_res_info_t info;
	uint32_t tag;
	int err = handle_tag(h, &tag);

	if (err != 0)
		return err;
	if (out == NULL)
		return TFALLOC_EINVAL;
	tfa_shim_call_begin();
	err = tfa_res_info(tag, &info);
	if (err == 0) {
		memset(out, 0, sizeof(*out));
		err = fill_handle(tag, &out->handle);
		out->refcount = info.refcount;
		out->deleted = info.state == TFA_RES_DELETED;
		out->memory_used = info.memory_used > 0 ? (uint64_t)info.memory_used : 0;
		out->peak_memory_used = info.peak > 0 ? (uint64_t)info.peak : 0;
		out->bytes_limit = (uint64_t)info.bytes_limit;
		memcpy(out->debug_string, info.debug, sizeof(out->debug_string));
	}
	tfa_shim_call_end();
	return err;
}

static int
api_resource_set_limit(const tfalloc_resource_handle_t *h, uint64_t bytes_limit)
{
	uint32_t tag;
	int err = handle_tag(h, &tag);

	if (err != 0)
		return err;
	if (bytes_limit > INT64_MAX)
		return TFALLOC_EINVAL;
	return tfa_res_set_limit(tag, (int64_t)bytes_limit);
}

static int
api_resource_stats(const tfalloc_resource_handle_t *h, const char *device, tfalloc_stats_t *out)
{
	tfa_res_stats_t st;
	tfa_res_info_t info;
	uint32_t tag;
	unsigned code;
	int err = handle_tag(h, &tag);

	if (err != 0)
		return err;
	if (out == NULL)
		return TFALLOC_EINVAL;
	if ((err = device_code(device, &code)) != 0)
		return err;
	if ((err = tfa_res_device_stats(tag, code, &st)) != 0 || (err = tfa_res_info(tag, &info)) != 0)
		return err;
	*out = (tfalloc_stats_t){
		.num_allocs = st.num_allocs,
		.num_frees = st.num_frees,
		.bytes_in_use = (uint64_t)st.bytes_in_use,
		.peak_bytes_in_use = (uint64_t)st.peak_bytes_in_use,
		.largest_alloc_size = st.largest_alloc_size,
		.total_bytes = st.total_bytes,
		.bytes_limit = (uint64_t)info.bytes_limit,
		.allocated_bytes_in_use = (uint64_t)st.allocated_bytes_in_use,
		.peak_allocated_bytes_in_use = (uint64_t)st.peak_allocated_bytes_in_use,
		.total_allocated_bytes = st.total_allocated_bytes,
	};
	return TFALLOC_OK;
}

/* ---- cleanup: the scoped leak check -------------------------------------------------------- */

struct cleanup_walk {
	const uint64_t *member; /* bitmap of the container's tags */
	struct cleanup *c;
};

static void
cleanup_visit(void *arg, const tfa_record_t *rec)
{
	struct cleanup_walk *w = arg;
	tfa_alloc_info_t info;

	if (rec->tag == 0 || rec->tag >= TFA_RES_MAX || !(w->member[rec->tag / 64] & (1ULL << (rec->tag % 64))))
		return;
	tfa_record_unpack(rec, &info);
	if (info.kind == TFA_KIND_INTERNAL)
		return;
	struct cleanup *c = w->c;
	c->counts[TFA_CLEANF_BLOCKS]++;
	c->counts[TFA_CLEANF_BYTES] += info.requested;
	for (uint32_t i = 0; i < c->ngroups; i++) {
		struct cleanup_group *g = &c->groups[i];
		if (g->tag == info.tag && g->stack_id == info.stack_id) {
			g->blocks++;
			g->bytes += info.requested;
			return;
		}
	}
	if (c->ngroups == CLEANUP_GROUPS_MAX) {
		c->counts[TFA_CLEANF_GROUPS_DROPPED]++;
		return;
	}
	c->groups[c->ngroups++] = (struct cleanup_group){
		.tag = info.tag,
		.stack_id = info.stack_id,
		.blocks = 1,
		.bytes = info.requested,
		.sample = info.ptr,
	};
}

static uint64_t
realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One line per group, at most 10, after the summary. */
static void
print_cleanup(const struct cleanup *c)
{
	char b[32];

	tfa_format_bytes(b, sizeof(b), c->counts[TFA_CLEANF_BYTES]);
	tfa_log("cleanup of container \"%s\": %llu blocks (%s) still live, charged to its resources",
		c->container, (unsigned long long)c->counts[TFA_CLEANF_BLOCKS], b);
	for (uint32_t i = 0; i < c->ngroups && i < 10; i++) {
		const struct cleanup_group *g = &c->groups[i];
		tfa_res_info_t info;
		if (tfa_res_info(g->tag, &info) != 0)
			continue;
		tfa_format_bytes(b, sizeof(b), g->bytes);
		tfa_log("  %llu blocks (%s) of %s/%s, e.g. %p, stack %u (tfalloc report shows it)",
			(unsigned long long)g->blocks, b, info.container, info.name, (void *)g->sample,
			g->stack_id);
	}
	if (c->ngroups > 10)
		tfa_log("  ... %u more groups in the profile", c->ngroups - 10);
}

static int
api_container_cleanup(const char *container, tfalloc_cleanup_result_t *out)
{
	uint32_t stack_tags[256];
	uint32_t *tags = stack_tags;
	size_t cap = TFA_ARRAY_SIZE(stack_tags);
	size_t mapped = 0;
	size_t ntags = 0;
	int err = tfa_res_check_name(container, true);

	if (out != NULL)
		memset(out, 0, sizeof(*out));
	if (err != 0)
		return err;
	tfa_shim_call_begin();
	/* Room for every tag there can be: resources made meanwhile by other threads included. */
	if (tfa_res_tag_end() > cap) {
		mapped = (size_t)TFA_RES_MAX * sizeof(*tags);
		tags = tfa_arena_map(mapped);
		cap = TFA_RES_MAX;
		if (tags == NULL) {
			tfa_shim_call_end();
			return TFALLOC_ENOMEM;
		}
	}
	err = tfa_res_cleanup(container, tags, cap, &ntags);
	if (err != 0)
		goto out;
	/* Blocks still live, from the resources' figures: a clean container costs no walk. */
	uint64_t live = 0;
	for (size_t i = 0; i < ntags && i < cap; i++) {
		for (unsigned d = 0; d < TFA_RES_DEVICES; d++) {
			tfa_res_stats_t st;
			tfa_resource_t *r = tfa_res_get(tags[i]);
			if (r == NULL || !(__atomic_load_n(&r->devices, __ATOMIC_RELAXED) & (1u << d)))
				continue;
			tfa_res_device_stats(tags[i], d, &st);
			live += st.num_allocs - st.num_frees;
		}
	}
	if (out != NULL)
		out->resources = (uint32_t)ntags;
	if (live == 0)
		goto out;

	static uint64_t member[TFA_RES_MAX / 64];
	static struct cleanup scratch;
	tfa_lock(&cleanups_lock);
	memset(member, 0, sizeof(member));
	memset(&scratch, 0, sizeof(scratch));
	for (size_t i = 0; i < ntags && i < cap; i++)
		member[tags[i] / 64] |= 1ULL << (tags[i] % 64);
	struct cleanup_walk w = { .member = member, .c = &scratch };
	scratch.t_ns = realtime_ns();
	scratch.counts[TFA_CLEANF_RESOURCES] = ntags;
	tfa_snprintf(scratch.container, sizeof(scratch.container), "%s",
		     container[0] != '\0' ? container : TFA_RES_DEFAULT_CONTAINER);
	tfa_shim_foreach_record(cleanup_visit, &w);
	if (out != NULL) {
		out->blocks = scratch.counts[TFA_CLEANF_BLOCKS];
		out->bytes = scratch.counts[TFA_CLEANF_BYTES];
	}
	if (scratch.counts[TFA_CLEANF_BLOCKS] != 0) {
		if (!tfa_shim_quiet())
			print_cleanup(&scratch);
		if (cleanups == NULL)
			cleanups = tfa_arena_map(CLEANUPS_MAX * sizeof(*cleanups));
		if (cleanups != NULL && ncleanups < CLEANUPS_MAX) {
			cleanups[ncleanups] = scratch;
			__atomic_store_n(&ncleanups, ncleanups + 1, __ATOMIC_RELEASE);
		} else {
			cleanups_dropped++;
		}
	}
	tfa_unlock(&cleanups_lock);
out:
	if (mapped != 0)
		tfa_arena_unmap(tags, mapped);
	tfa_shim_call_end();
	return err;
}

static int
api_clear(void)
{
	tfa_shim_call_begin();
	tfa_res_clear();
	tfa_shim_call_end();
	return TFALLOC_OK;
}

static int
api_container_info(const char *container_attr, const char *shared_name_attr, const char *node_name,
		   int use_node_name_as_default, tfalloc_container_info_t *out)
{
	tfa_res_container_info_t ci;

	if (out == NULL)
		return TFALLOC_EINVAL;
	int err = tfa_res_container_info(container_attr, shared_name_attr, node_name,
					 use_node_name_as_default != 0, &ci);
	memset(out, 0, sizeof(*out));
	if (err == 0) {
		memcpy(out->container, ci.container, sizeof(out->container));
		memcpy(out->name, ci.name, sizeof(out->name));
		out->resource_is_private_to_kernel = ci.resource_is_private_to_kernel;
	}
	return err;
}

/* ---- the process --------------------------------------------------------------------------- */

static int
api_device_stats(const char *device, tfalloc_stats_t *out)
{
	tfa_allocator_stats_t st;
	unsigned code;
	int err;

	if (out == NULL)
		return TFALLOC_EINVAL;
	if ((err = device_code(device, &code)) != 0)
		return err;
	tfa_shim_call_begin();
	bool ok = tfa_shim_device_stats(code, &st);
	tfa_shim_call_end();
	if (!ok)
		return TFALLOC_ENOENT;
	*out = (tfalloc_stats_t){
		.num_allocs = (uint64_t)st.num_allocs,
		.num_frees = (uint64_t)st.num_frees,
		.bytes_in_use = (uint64_t)st.bytes_in_use,
		.peak_bytes_in_use = (uint64_t)st.peak_bytes_in_use,
		.largest_alloc_size = (uint64_t)st.largest_alloc_size,
		.total_bytes = (uint64_t)st.total_bytes,
		.bytes_limit = (uint64_t)st.bytes_limit,
		.allocated_bytes_in_use = (uint64_t)st.allocated_bytes_in_use,
		.peak_allocated_bytes_in_use = (uint64_t)st.peak_allocated_bytes_in_use,
		.total_allocated_bytes = (uint64_t)st.total_allocated_bytes,
	};
	return TFALLOC_OK;
}

static int
api_dump_profile(char *path_out, size_t path_size)
{
	if (path_out != NULL && path_size > 0)
		path_out[0] = '\0';
	/* Like a shim call: a signal that comes meanwhile is deferred, and handled at the end. */
	tfa_shim_call_begin();
	int err = tfa_shim_write_profile(TFA_END_RUNNING, 0);
	tfa_shim_call_end();
	if (err != 0)
		return TFALLOC_EIO;
	if (path_out != NULL && path_size > 0) {
		const char *p = tfa_shim_profile_path();
		if (strlen(p) >= path_size)
			return TFALLOC_ENAMETOOLONG;
		memcpy(path_out, p, strlen(p) + 1);
	}
	return TFALLOC_OK;
}

static int
api_pointer_info(const void *ptr, tfalloc_pointer_info_t *out)
{
	tfa_alloc_info_t info;
	uint64_t allocated;

	if (ptr == NULL || out == NULL)
		return TFALLOC_EINVAL;
	tfa_shim_call_begin();
	bool found = tfa_shim_pointer_info(ptr, &info, &allocated);
	tfa_shim_call_end();
	memset(out, 0, sizeof(*out));
	if (!found || info.kind == TFA_KIND_INTERNAL)
		return TFALLOC_ENOENT;
	out->requested_size = info.requested;
	out->allocated_size = allocated;
	out->allocation_id = info.id;
	out->resource_id = info.tag;
	tfa_snprintf(out->device, sizeof(out->device), "%s", tfa_devcode_name(info.device));
	return TFALLOC_OK;
}

static const struct tfalloc_api api = {
	.version = TFALLOC_API_VERSION,
	.size = sizeof(struct tfalloc_api),
	.scope_enter = api_scope_enter,
	.scope_enter_handle = api_scope_enter_handle,
	.scope_exit = api_scope_exit,
	.resource_create = api_resource_create,
	.resource_lookup = api_resource_lookup,
	.resource_lookup_or_create = api_resource_lookup_or_create,
	.resource_unref = api_resource_unref,
	.resource_delete = api_resource_delete,
	.resource_delete_handle = api_resource_delete_handle,
	.resource_info = api_resource_info,
	.resource_set_limit = api_resource_set_limit,
	.resource_stats = api_resource_stats,
	.container_cleanup = api_container_cleanup,
	.clear = api_clear,
	.container_info = api_container_info,
	.device_stats = api_device_stats,
	.dump_profile = api_dump_profile,
	.pointer_info = api_pointer_info,
};

/* What preload/tfalloc.h looks for: NULL when the shim does not run (disabled, shutting down). */
TFA_EXPORT const struct tfalloc_api *tfalloc_control_api(void);

const struct tfalloc_api *
tfalloc_control_api(void)
{
	tfa_shim_state_t s = tfa_shim_state();
	return s == TFA_SHIM_READY || s == TFA_SHIM_SHUTDOWN ? &api : NULL;
}

/* ---- --tag-by thread ----------------------------------------------------------------------- */

void
tfa_control_init(const char *tag_by)
{
	if (tag_by[0] == '\0')
		return;
	if (strcmp(tag_by, "thread") == 0)
		tfa_control_tag_by_thread = true;
	else
		tfa_log("TFALLOC_TAG_BY=\"%.*s\": not one of thread or empty; tagging nothing", 64,
			tag_by);
}

void
tfa_control_thread_renamed(void)
{
	__atomic_add_fetch(&names_generation, 1, __ATOMIC_RELEASE);
}

void
tfa_control_thread_tag(void)
{
	uint32_t gen = __atomic_load_n(&names_generation, __ATOMIC_ACQUIRE);
	char path[64];
	char name[32];
	uint32_t tag;

	if (scopes.names_seen == gen)
		return;
	scopes.names_seen = gen;
	tfa_snprintf(path, sizeof(path), "/proc/self/task/%ld/comm", (long)gettid());
	long n = tfa_read_small_file(path, name, sizeof(name));
	if (n <= 0)
		return;
	if (name[n - 1] == '\n')
		name[n - 1] = '\0';
	if (name[0] == '\0')
		return;
	/* The thread's own reference, for as long as it has the name. */
	if (tfa_res_lookup_or_create(THREADS_CONTAINER, THREAD_TYPE, name, NULL, &tag, NULL) != 0)
		return;
	uint32_t old = scopes.thread_tag;
	scopes.thread_tag = tag;
	/* Below the scopes, or current when there are none. */
	if (scopes.depth > 0)
		scopes.saved[0] = tag;
	else
		tfa_tls.tag = tag;
	if (old != 0)
		tfa_res_unref(old);
}

/* ---- the profile --------------------------------------------------------------------------- */

static const char *
device_name(unsigned code)
{
	return tfa_devcode_name(code);
}

void
tfa_control_write_records(tfa_pw_t *w)
{
	uint32_t end = tfa_res_tag_end();

	/* Lock-free: a resource's coordinates never change once its tag is published. */
	for (uint32_t t = 1; t < end; t++) {
		tfa_resource_t *r = tfa_res_get(t);
		const char *container = tfa_res_container_name(t);
		if (r == NULL || container == NULL)
			continue;
		uint64_t f[TFA_RESF_FIELD_COUNT] = {
			[TFA_RESF_BYTES_LIMIT] = (uint64_t)__atomic_load_n(&r->bytes_limit, __ATOMIC_RELAXED),
			[TFA_RESF_MEMORY_USED] = (uint64_t)__atomic_load_n(&r->in_use, __ATOMIC_RELAXED),
			[TFA_RESF_PEAK_MEMORY_USED] = (uint64_t)__atomic_load_n(&r->peak, __ATOMIC_RELAXED),
		};
		tfa_pw_begin(w, TFA_REC_RESOURCE);
		tfa_pw_u32(w, t);
		tfa_pw_u32(w, __atomic_load_n(&r->state, __ATOMIC_RELAXED));
		tfa_pw_u32(w, __atomic_load_n(&r->refcount, __ATOMIC_RELAXED));
		tfa_pw_u64(w, r->type_hash);
		tfa_pw_str(w, container);
		tfa_pw_str(w, r->type_name);
		tfa_pw_str(w, r->name);
		tfa_pw_str(w, r->debug);
		tfa_pw_counts(w, f, TFA_RESF_FIELD_COUNT);
		uint32_t devices = __atomic_load_n(&r->devices, __ATOMIC_RELAXED);
		for (unsigned d = 0; d < TFA_RES_DEVICES; d++) {
			tfa_res_stats_t st;
			if (!(devices & (1u << d)))
				continue;
			tfa_res_device_stats(t, d, &st);
			uint64_t v[TFA_RESD_FIELD_COUNT] = {
				[TFA_RESD_NUM_ALLOCS] = st.num_allocs,
				[TFA_RESD_NUM_FREES] = st.num_frees,
				[TFA_RESD_BYTES_IN_USE] = (uint64_t)st.bytes_in_use,
				[TFA_RESD_PEAK_BYTES_IN_USE] = (uint64_t)st.peak_bytes_in_use,
				[TFA_RESD_LARGEST_ALLOC_SIZE] = st.largest_alloc_size,
				[TFA_RESD_TOTAL_BYTES] = st.total_bytes,
				[TFA_RESD_ALLOCATED_BYTES_IN_USE] = (uint64_t)st.allocated_bytes_in_use,
				[TFA_RESD_PEAK_ALLOCATED_BYTES_IN_USE] = (uint64_t)st.peak_allocated_bytes_in_use,
				[TFA_RESD_TOTAL_ALLOCATED_BYTES] = st.total_allocated_bytes,
			};
			tfa_pw_str(w, device_name(d));
			tfa_pw_counts(w, v, TFA_RESD_FIELD_COUNT);
		}
		tfa_pw_end(w);
	}

	/* Entries up to ncleanups are complete and never change again. */
	uint32_t n = __atomic_load_n(&ncleanups, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		const struct cleanup *c = &cleanups[i];
		tfa_pw_begin(w, TFA_REC_CLEANUP);
		tfa_pw_u64(w, c->t_ns);
		tfa_pw_str(w, c->container);
		tfa_pw_counts(w, c->counts, TFA_CLEANF_FIELD_COUNT);
		for (uint32_t g = 0; g < c->ngroups; g++) {
			tfa_pw_u32(w, c->groups[g].tag);
			tfa_pw_u32(w, c->groups[g].stack_id);
			tfa_pw_u64(w, c->groups[g].blocks);
			tfa_pw_u64(w, c->groups[g].bytes);
			tfa_pw_u64(w, c->groups[g].sample);
		}
		tfa_pw_end(w);
	}
}

void
tfa_control_prefork(void)
{
	tfa_lock(&cleanups_lock);
	tfa_res_prefork();
}

void
tfa_control_postfork_parent(void)
{
	tfa_res_postfork_parent();
	tfa_unlock(&cleanups_lock);
}

void
tfa_control_postfork_child(void)
{
	tfa_res_postfork_child();
	tfa_lock_init(&cleanups_lock);
}
