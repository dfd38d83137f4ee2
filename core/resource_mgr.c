/* SPDX-License-Identifier: MIT */
#include "core/resource_mgr.h"

#include <string.h>

#include "core/arena.h"
#include "core/lock.h"
#include "core/log.h"

#define CHUNK_LG     6
#define CHUNK        (1u << CHUNK_LG)
#define NCHUNKS      (TFA_RES_MAX / CHUNK)
#define INDEX_CAP    (2 * TFA_RES_MAX) /* open addressing, at most half full */
#define INDEX_EMPTY  0u
#define INDEX_GONE   UINT32_MAX       /* a deleted key: probing goes on past it */

typedef struct container_s {
	uint64_t hash;
	uint32_t live; /* in the manager (made and not cleaned up) */
	uint32_t resources; /* live resources in it */
	uint32_t first_tag; /* tags below it were reported by an earlier cleanup (or clear) */
	char name[TFA_RES_NAME_MAX + 1];
} container_t;

static tfa_lock_t mgr_lock = TFA_LOCK_INIT;
static tfa_resource_t *chunks[NCHUNKS];
static uint32_t *key_index;     /* INDEX_CAP tags, mapped on first use */
static container_t *containers; /* TFA_RES_CONTAINERS_MAX, mapped on first use */
static uint32_t ncontainers;
static uint32_t tag_end = 1;    /* the next tag; 0 is "no resource" */
static uint64_t private_names;  /* ContainerInfo's counter */

/* ---- names and hashes ---------------------------------------------------------------------- */

static uint64_t
fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define FNV_BASIS 0xcbf29ce484222325ULL

uint64_t
tfa_res_type_hash(const char *type_name)
{
	return fnv1a(FNV_BASIS, type_name, strlen(type_name));
}

int
tfa_res_check_name(const char *name, bool allow_empty)
{
	if (name == NULL)
		return TFA_RES_EINVAL;
	size_t n = strnlen(name, TFA_RES_NAME_MAX + 1);
	if (n == 0 && !allow_empty)
		return TFA_RES_EINVAL;
	if (n > TFA_RES_NAME_MAX)
		return TFA_RES_ENAMETOOLONG;
	return TFA_RES_OK;
}

static uint64_t
key_hash(uint32_t container, uint64_t type_hash, const char *name)
{
	uint64_t h = fnv1a(FNV_BASIS, &container, sizeof(container));
	h = fnv1a(h, &type_hash, sizeof(type_hash));
	return fnv1a(h, name, strlen(name));
}

/* ---- storage ------------------------------------------------------------------------------- */

tfa_resource_t *
tfa_res_get(uint32_t tag)
{
	if (tag == 0 || tag >= __atomic_load_n(&tag_end, __ATOMIC_ACQUIRE))
		return NULL;
	tfa_resource_t *c = __atomic_load_n(&chunks[tag >> CHUNK_LG], __ATOMIC_ACQUIRE);
	return c != NULL ? &c[tag & (CHUNK - 1)] : NULL;
}

/* REQUIRES: mgr_lock.  The index and the containers, mapped on first use. */
static bool
ensure_tables(void)
{
	if (key_index == NULL) {
		key_index = tfa_arena_map(INDEX_CAP * sizeof(*key_index));
		if (key_index == NULL)
			return false;
	}
	if (containers == NULL) {
		containers = tfa_arena_map(TFA_RES_CONTAINERS_MAX * sizeof(*containers));
		if (containers == NULL)
			return false;
	}
	return true;
}

/* REQUIRES: mgr_lock.  The container's index, made (live) when create says so; -1: none / full. */
static int
find_container(const char *name, bool create)
{
	if (name[0] == '\0')
		name = TFA_RES_DEFAULT_CONTAINER;
	uint64_t h = fnv1a(FNV_BASIS, name, strlen(name));
	for (uint32_t i = 0; i < ncontainers; i++) {
		container_t *c = &containers[i];
		if (c->hash == h && strcmp(c->name, name) == 0) {
			if (!c->live && !create)
				return -1;
			if (!c->live)
				c->first_tag = tag_end; /* made again: a new generation */
			c->live = 1;
			return (int)i;
		}
	}
	if (!create || ncontainers >= TFA_RES_CONTAINERS_MAX)
		return -1;
	container_t *c = &containers[ncontainers];
	c->hash = h;
	c->live = 1;
	c->first_tag = tag_end;
	memcpy(c->name, name, strlen(name) + 1);
	return (int)ncontainers++;
}

/* REQUIRES: mgr_lock.  The index slot of a key: its tag's, or the first free one on its probe. */
static uint32_t *
find_key(uint32_t container, uint64_t type_hash, const char *name, bool *found)
{
	uint64_t i = key_hash(container, type_hash, name) & (INDEX_CAP - 1);
	uint32_t *free_slot = NULL;

	for (uint32_t probes = 0; probes < INDEX_CAP; probes++, i = (i + 1) & (INDEX_CAP - 1)) {
		uint32_t t = key_index[i];
		if (t == INDEX_EMPTY) {
			*found = false;
			return free_slot != NULL ? free_slot : &key_index[i];
		}
		if (t == INDEX_GONE) {
			if (free_slot == NULL)
				free_slot = &key_index[i];
			continue;
		}
		tfa_resource_t *r = tfa_res_get(t);
		if (r->container == container && r->type_hash == type_hash && strcmp(r->name, name) == 0) {
			*found = true;
			return &key_index[i];
		}
	}
	*found = false;
	return free_slot;
}

/* REQUIRES: mgr_lock.  A new resource's storage and tag; NULL when none is left. */
static tfa_resource_t *
new_resource(void)
{
	uint32_t tag = tag_end;
	if (tag >= TFA_RES_MAX)
		return NULL;
	tfa_resource_t *c = chunks[tag >> CHUNK_LG];
	if (c == NULL) {
		c = tfa_arena_map(CHUNK * sizeof(tfa_resource_t));
		if (c == NULL)
			return NULL;
		__atomic_store_n(&chunks[tag >> CHUNK_LG], c, __ATOMIC_RELEASE);
	}
	tfa_resource_t *r = &c[tag & (CHUNK - 1)];
	memset(r, 0, sizeof(*r));
	r->tag = tag;
	return r;
}

/* REQUIRES: mgr_lock.  The arguments of a key checked, its container found (or made). */
static int
resolve_key(const char *container, const char *type_name, const char *name, bool create_container,
	    int *ci)
{
	int err;

	if ((err = tfa_res_check_name(container, true)) != 0 || (err = tfa_res_check_name(type_name, false)) != 0
	    || (err = tfa_res_check_name(name, false)) != 0)
		return err;
	if (!ensure_tables())
		return TFA_RES_ENOMEM;
	*ci = find_container(container, create_container);
	if (*ci < 0)
		return create_container ? TFA_RES_ENOMEM : TFA_RES_ENOENT;
	return TFA_RES_OK;
}

static void
copy_str(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* REQUIRES: mgr_lock. */
static int
lookup_or_create_locked(const char *container, const char *type_name, const char *name,
			const char *debug, bool may_create, bool may_find, uint32_t *tag, bool *created)
{
	int ci;
	bool found;
	int err = resolve_key(container, type_name, name, may_create, &ci);

	if (err != 0)
		return err;
	uint64_t th = tfa_res_type_hash(type_name);
	uint32_t *slot = find_key((uint32_t)ci, th, name, &found);
	if (found) {
		if (!may_find)
			return TFA_RES_EEXIST;
		tfa_resource_t *r = tfa_res_get(*slot);
		r->refcount++;
		*tag = r->tag;
		if (created != NULL)
			*created = false;
		return TFA_RES_OK;
	}
	if (!may_create)
		return TFA_RES_ENOENT;
	tfa_resource_t *r = slot != NULL ? new_resource() : NULL;
	if (r == NULL)
		return TFA_RES_ENOMEM;
	r->container = (uint32_t)ci;
	r->type_hash = th;
	/* The manager's reference, and the caller's when it looked up. */
	r->refcount = may_find ? 2 : 1;
	r->state = TFA_RES_LIVE;
	copy_str(r->name, sizeof(r->name), name);
	copy_str(r->type_name, sizeof(r->type_name), type_name);
	if (debug != NULL)
		copy_str(r->debug, sizeof(r->debug), debug);
	else
		tfa_snprintf(r->debug, sizeof(r->debug), "%s %s", type_name, name);
	containers[ci].resources++;
	*slot = r->tag;
	__atomic_store_n(&tag_end, r->tag + 1, __ATOMIC_RELEASE);
	*tag = r->tag;
	if (created != NULL)
		*created = true;
	return TFA_RES_OK;
}

int
tfa_res_create(const char *container, const char *type_name, const char *name, const char *debug,
	       uint32_t *tag)
{
	uint32_t t = 0;
	tfa_lock(&mgr_lock);
	int err = lookup_or_create_locked(container, type_name, name, debug, true, false, &t, NULL);
	tfa_unlock(&mgr_lock);
	if (tag != NULL)
		*tag = t;
	return err;
}

int
tfa_res_lookup(const char *container, const char *type_name, const char *name, uint32_t *tag)
{
	uint32_t t = 0;
	tfa_lock(&mgr_lock);
	int err = lookup_or_create_locked(container, type_name, name, NULL, false, true, &t, NULL);
	tfa_unlock(&mgr_lock);
	if (tag != NULL)
		*tag = t;
	return err;
}

int
tfa_res_lookup_or_create(const char *container, const char *type_name, const char *name,
			 const char *debug, uint32_t *tag, bool *created)
{
	uint32_t t = 0;
	tfa_lock(&mgr_lock);
	int err = lookup_or_create_locked(container, type_name, name, debug, true, true, &t, created);
	tfa_unlock(&mgr_lock);
	if (tag != NULL)
		*tag = t;
	return err;
}

/* A reference more (delta 1) or less (-1): EINVAL when none is left to change. */
static int
adjust_ref(uint32_t tag, int delta)
{
	int err = TFA_RES_ENOENT;

	tfa_lock(&mgr_lock);
	tfa_resource_t *r = tfa_res_get(tag);
	if (r != NULL && r->state != TFA_RES_FREE) {
		err = r->refcount > 0 ? TFA_RES_OK : TFA_RES_EINVAL;
		if (err == 0)
			r->refcount += (uint32_t)delta;
	}
	tfa_unlock(&mgr_lock);
	return err;
}

int
tfa_res_ref(uint32_t tag)
{
	return adjust_ref(tag, 1);
}

int
tfa_res_unref(uint32_t tag)
{
	return adjust_ref(tag, -1);
}

/* REQUIRES: mgr_lock.  Out of its container, the manager's reference dropped. */
static void
delete_locked(tfa_resource_t *r, uint32_t *slot)
{
	*slot = INDEX_GONE;
	r->state = TFA_RES_DELETED;
	if (r->refcount > 0)
		r->refcount--;
	if (containers[r->container].resources > 0)
		containers[r->container].resources--;
}

int
tfa_res_delete(const char *container, const char *type_name, const char *name)
{
	int ci;
	bool found;

	tfa_lock(&mgr_lock);
	int err = resolve_key(container, type_name, name, false, &ci);
	if (err == 0) {
		uint32_t *slot = find_key((uint32_t)ci, tfa_res_type_hash(type_name), name, &found);
		if (found)
			delete_locked(tfa_res_get(*slot), slot);
		else
			err = TFA_RES_ENOENT;
	}
	tfa_unlock(&mgr_lock);
	return err;
}

int
tfa_res_delete_tag(uint32_t tag)
{
	bool found = false;
	int err = TFA_RES_ENOENT;

	tfa_lock(&mgr_lock);
	tfa_resource_t *r = tfa_res_get(tag);
	if (r != NULL && r->state == TFA_RES_LIVE) {
		uint32_t *slot = find_key(r->container, r->type_hash, r->name, &found);
		if (found && *slot == tag) {
			delete_locked(r, slot);
			err = TFA_RES_OK;
		}
	}
	tfa_unlock(&mgr_lock);
	return err;
}

int
tfa_res_cleanup(const char *container, uint32_t *tags, size_t max_tags, size_t *ntags)
{
	size_t n = 0;
	int err = tfa_res_check_name(container, true);

	if (ntags != NULL)
		*ntags = 0;
	if (err != 0)
		return err;
	tfa_lock(&mgr_lock);
	int ci = containers != NULL ? find_container(container, false) : -1;
	if (ci < 0) {
		tfa_unlock(&mgr_lock);
		return TFA_RES_ENOENT;
	}
	/*
	 * The resources made since the container was (re)made: those of an
	 * earlier life of the container were reported by its earlier cleanup.
	 */
	uint32_t first = containers[ci].first_tag > 0 ? containers[ci].first_tag : 1;
	for (uint32_t t = first; t < tag_end; t++) {
		tfa_resource_t *r = tfa_res_get(t);
		if (r->container != (uint32_t)ci)
			continue;
		/* The deleted ones of this container still hold what was charged to them. */
		if (r->state == TFA_RES_LIVE) {
			bool found;
			uint32_t *slot = find_key(r->container, r->type_hash, r->name, &found);
			if (found)
				delete_locked(r, slot);
		}
		if (tags != NULL && n < max_tags)
			tags[n] = t;
		n++;
	}
	containers[ci].live = 0;
	containers[ci].resources = 0;
	tfa_unlock(&mgr_lock);
	if (ntags != NULL)
		*ntags = n;
	return TFA_RES_OK;
}

void
tfa_res_clear(void)
{
	tfa_lock(&mgr_lock);
	for (uint32_t t = 1; t < tag_end; t++) {
		tfa_resource_t *r = tfa_res_get(t);
		if (r->state != TFA_RES_LIVE)
			continue;
		bool found;
		uint32_t *slot = find_key(r->container, r->type_hash, r->name, &found);
		if (found)
			delete_locked(r, slot);
	}
	for (uint32_t i = 0; i < ncontainers; i++) {
		containers[i].live = 0;
		containers[i].resources = 0;
	}
	tfa_unlock(&mgr_lock);
}

int
tfa_res_set_limit(uint32_t tag, int64_t bytes_limit)
{
	tfa_resource_t *r = tfa_res_get(tag);

	if (r == NULL || bytes_limit < 0)
		return r == NULL ? TFA_RES_ENOENT : TFA_RES_EINVAL;
	__atomic_store_n(&r->bytes_limit, bytes_limit, __ATOMIC_RELAXED);
	return TFA_RES_OK;
}

int
tfa_res_info(uint32_t tag, tfa_res_info_t *out)
{
	memset(out, 0, sizeof(*out));
	tfa_lock(&mgr_lock);
	tfa_resource_t *r = tfa_res_get(tag);
	if (r == NULL || r->state == TFA_RES_FREE) {
		tfa_unlock(&mgr_lock);
		return TFA_RES_ENOENT;
	}
	out->tag = r->tag;
	out->refcount = r->refcount;
	out->state = r->state;
	out->devices = __atomic_load_n(&r->devices, __ATOMIC_RELAXED);
	out->type_hash = r->type_hash;
	out->bytes_limit = __atomic_load_n(&r->bytes_limit, __ATOMIC_RELAXED);
	out->memory_used = __atomic_load_n(&r->in_use, __ATOMIC_RELAXED);
	out->peak = __atomic_load_n(&r->peak, __ATOMIC_RELAXED);
	copy_str(out->container, sizeof(out->container), containers[r->container].name);
	copy_str(out->name, sizeof(out->name), r->name);
	copy_str(out->type_name, sizeof(out->type_name), r->type_name);
	copy_str(out->debug, sizeof(out->debug), r->debug);
	tfa_unlock(&mgr_lock);
	return TFA_RES_OK;
}

int
tfa_res_device_stats(uint32_t tag, unsigned device, tfa_res_stats_t *out)
{
	tfa_resource_t *r = tfa_res_get(tag);

	memset(out, 0, sizeof(*out));
	if (r == NULL)
		return TFA_RES_ENOENT;
	if (device >= TFA_RES_DEVICES)
		return TFA_RES_OK;
	const tfa_res_stats_t *d = &r->dev[device];
	out->num_allocs = __atomic_load_n(&d->num_allocs, __ATOMIC_RELAXED);
	out->num_frees = __atomic_load_n(&d->num_frees, __ATOMIC_RELAXED);
	out->total_bytes = __atomic_load_n(&d->total_bytes, __ATOMIC_RELAXED);
	out->total_allocated_bytes = __atomic_load_n(&d->total_allocated_bytes, __ATOMIC_RELAXED);
	out->largest_alloc_size = __atomic_load_n(&d->largest_alloc_size, __ATOMIC_RELAXED);
	out->bytes_in_use = __atomic_load_n(&d->bytes_in_use, __ATOMIC_RELAXED);
	out->allocated_bytes_in_use = __atomic_load_n(&d->allocated_bytes_in_use, __ATOMIC_RELAXED);
	out->peak_bytes_in_use = __atomic_load_n(&d->peak_bytes_in_use, __ATOMIC_RELAXED);
	out->peak_allocated_bytes_in_use =
		__atomic_load_n(&d->peak_allocated_bytes_in_use, __ATOMIC_RELAXED);
	return TFA_RES_OK;
}

uint32_t
tfa_res_tag_end(void)
{
	return __atomic_load_n(&tag_end, __ATOMIC_ACQUIRE);
}

const char *
tfa_res_container_name(uint32_t tag)
{
	tfa_resource_t *r = tfa_res_get(tag);
	/* Container entries are never reused nor renamed: the name stays valid. */
	return r != NULL && r->state != TFA_RES_FREE ? containers[r->container].name : NULL;
}

int
tfa_res_container_info(const char *container_attr, const char *shared_name_attr,
		       const char *node_name, bool use_node_name_as_default,
		       tfa_res_container_info_t *out)
{
	int err;

	memset(out, 0, sizeof(*out));
	if ((err = tfa_res_check_name(container_attr, true)) != 0
	    || (err = tfa_res_check_name(shared_name_attr, true)) != 0
	    || (err = tfa_res_check_name(node_name, false)) != 0)
		return err;
	/* As TensorFlow: names starting with '_' are the private ones made below. */
	if (shared_name_attr[0] == '_')
		return TFA_RES_EINVAL;
	copy_str(out->container, sizeof(out->container),
		 container_attr[0] != '\0' ? container_attr : TFA_RES_DEFAULT_CONTAINER);
	if (shared_name_attr[0] != '\0') {
		copy_str(out->name, sizeof(out->name), shared_name_attr);
	} else if (use_node_name_as_default) {
		copy_str(out->name, sizeof(out->name), node_name);
	} else {
		uint64_t n = __atomic_fetch_add(&private_names, 1, __ATOMIC_RELAXED);
		size_t len = (size_t)tfa_snprintf(out->name, sizeof(out->name), "_%lu_%s",
						  (unsigned long)n, node_name);
		if (len >= sizeof(out->name))
			return TFA_RES_ENAMETOOLONG;
		out->resource_is_private_to_kernel = true;
	}
	return TFA_RES_OK;
}

/* ---- charging ------------------------------------------------------------------------------ */

static void
raise_to(int64_t *peak, int64_t now)
{
	int64_t old = __atomic_load_n(peak, __ATOMIC_RELAXED);
	while (now > old && !__atomic_compare_exchange_n(peak, &old, now, true, __ATOMIC_RELAXED,
							 __ATOMIC_RELAXED))
		;
}

bool
tfa_res_reserve(uint32_t tag, uint64_t bytes)
{
	tfa_resource_t *r = tfa_res_get(tag);

	if (r == NULL)
		return true;
	int64_t limit = __atomic_load_n(&r->bytes_limit, __ATOMIC_RELAXED);
	if (limit <= 0) {
		__atomic_add_fetch(&r->in_use, (int64_t)bytes, __ATOMIC_RELAXED);
		return true;
	}
	/*
	 * Only a reservation that fits is ever added: adding first and taking
	 * back a refused one would make a concurrent reservation that fits see
	 * the refused bytes and fail too.  Compared unsigned: a request of 2^63
	 * bytes or more is no negative charge.
	 */
	int64_t old = __atomic_load_n(&r->in_use, __ATOMIC_RELAXED);
	do {
		if (old > limit || bytes > (uint64_t)(limit - old))
			return false;
	} while (!__atomic_compare_exchange_n(&r->in_use, &old, old + (int64_t)bytes, true,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return true;
}

void
tfa_res_unreserve(uint32_t tag, uint64_t bytes)
{
	tfa_resource_t *r = tfa_res_get(tag);

	if (r != NULL)
		__atomic_sub_fetch(&r->in_use, (int64_t)bytes, __ATOMIC_RELAXED);
}

void
tfa_res_force_reserve(uint32_t tag, uint64_t bytes)
{
	tfa_resource_t *r = tfa_res_get(tag);

	if (r != NULL)
		__atomic_add_fetch(&r->in_use, (int64_t)bytes, __ATOMIC_RELAXED);
}

void
tfa_res_charge(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated)
{
	tfa_resource_t *r = tfa_res_get(tag);

	if (r == NULL)
		return;
	device &= TFA_RES_DEVICES - 1;
	tfa_res_stats_t *d = &r->dev[device];
	raise_to(&r->peak, __atomic_load_n(&r->in_use, __ATOMIC_RELAXED));
	if (!(__atomic_load_n(&r->devices, __ATOMIC_RELAXED) & (1u << device)))
		__atomic_fetch_or(&r->devices, 1u << device, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->num_allocs, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->total_bytes, bytes, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->total_allocated_bytes, allocated, __ATOMIC_RELAXED);
	uint64_t largest = __atomic_load_n(&d->largest_alloc_size, __ATOMIC_RELAXED);
	while (bytes > largest && !__atomic_compare_exchange_n(&d->largest_alloc_size, &largest, bytes,
							       true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	raise_to(&d->peak_bytes_in_use,
		 __atomic_add_fetch(&d->bytes_in_use, (int64_t)bytes, __ATOMIC_RELAXED));
	raise_to(&d->peak_allocated_bytes_in_use,
		 __atomic_add_fetch(&d->allocated_bytes_in_use, (int64_t)allocated, __ATOMIC_RELAXED));
}

void
tfa_res_uncharge(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated)
{
	tfa_resource_t *r = tfa_res_get(tag);

	if (r == NULL)
		return;
	tfa_res_stats_t *d = &r->dev[device & (TFA_RES_DEVICES - 1)];
	__atomic_sub_fetch(&r->in_use, (int64_t)bytes, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->num_frees, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&d->bytes_in_use, (int64_t)bytes, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&d->allocated_bytes_in_use, (int64_t)allocated, __ATOMIC_RELAXED);
}

/* ---- the process --------------------------------------------------------------------------- */

void
tfa_res_reset(void)
{
	for (uint32_t i = 0; i < NCHUNKS; i++) {
		if (chunks[i] != NULL)
			tfa_arena_unmap(chunks[i], CHUNK * sizeof(tfa_resource_t));
		chunks[i] = NULL;
	}
	if (key_index != NULL)
		tfa_arena_unmap(key_index, INDEX_CAP * sizeof(*key_index));
	if (containers != NULL)
		tfa_arena_unmap(containers, TFA_RES_CONTAINERS_MAX * sizeof(*containers));
	key_index = NULL;
	containers = NULL;
	ncontainers = 0;
	tag_end = 1;
	private_names = 0;
	tfa_lock_init(&mgr_lock);
}

void
tfa_res_prefork(void)
{
	tfa_lock(&mgr_lock);
}

void
tfa_res_postfork_parent(void)
{
	tfa_unlock(&mgr_lock);
}

void
tfa_res_postfork_child(void)
{
	tfa_lock_init(&mgr_lock);
}

void
tfa_res_undo_uncharge(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated)
{
	tfa_resource_t *r = tfa_res_get(tag);

	if (r == NULL)
		return;
	tfa_res_stats_t *d = &r->dev[device & (TFA_RES_DEVICES - 1)];
	__atomic_add_fetch(&r->in_use, (int64_t)bytes, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&d->num_frees, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->bytes_in_use, (int64_t)bytes, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->allocated_bytes_in_use, (int64_t)allocated, __ATOMIC_RELAXED);
}
