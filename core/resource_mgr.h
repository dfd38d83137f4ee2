/* SPDX-License-Identifier: MIT */
/*
 * ResourceMgr (TensorFlow's core/framework/resource_mgr, seed 004): named,
 * refcounted resources in named containers, and what tfalloc adds to them:
 * every resource is an allocation tag, so the memory a program allocates
 * while a resource is current on its thread is charged to it.
 *
 * Glossary:
 *   container   a named set of resources ("" means the default container,
 *               "default").  Cleaning one up deletes its resources and
 *               reports the memory still charged to them (a scoped leak check).
 *   resource    the key (container, type hash, name): the two-level map of the
 *               seed.  It carries a refcount (the manager's reference plus one
 *               per lookup and per scope that holds it), a debug string, a
 *               bytes limit, and the statistics of what was charged to it.
 *   tag         a resource's number, 1 .. TFA_RES_MAX-1, written into every
 *               record of the pointer table (core/ptr_table.h).  Tags are never
 *               reused: a deleted resource keeps its statistics for the report
 *               and its blocks keep pointing at it.
 *   type hash   FNV-1a of the type's name: stable across runs, unlike the
 *               seed's per-execution hash, so profiles of two runs compare.
 *
 * Memory: mapped, never from malloc (the shim calls this from inside
 * malloc for --tag-by thread).  Lookups and changes take one lock; charging
 * and uncharging (the allocation path) take none.
 */
#ifndef TFA_CORE_RESOURCE_MGR_H
#define TFA_CORE_RESOURCE_MGR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

#define TFA_RES_MAX            65536u /* tags 1 .. 65535 */
#define TFA_RES_NAME_MAX       127u   /* bytes of a name, without its NUL */
#define TFA_RES_DEBUG_MAX      255u
#define TFA_RES_CONTAINERS_MAX 4096u
#define TFA_RES_DEVICES        32u    /* device codes of a record (core/ptr_table.h: 5 bits) */
#define TFA_RES_DEFAULT_CONTAINER "default"
#define TFA_RES_SCOPE_TYPE        "scope" /* the type of resources made by scope_enter */

/* Results: 0 or one of these (the public header's TFALLOC_E* have the same values). */
enum tfa_res_error_e {
	TFA_RES_OK = 0,
	TFA_RES_ENOTACTIVE = -1,
	TFA_RES_EINVAL = -2,
	TFA_RES_ENAMETOOLONG = -3,
	TFA_RES_ENOENT = -4,
	TFA_RES_EEXIST = -5,
	TFA_RES_ESCOPE = -6,
	TFA_RES_ENOMEM = -7,
	TFA_RES_EIO = -8,
};

/* What was charged to one resource on one device.  Updated with relaxed atomics. */
typedef struct tfa_res_stats_s {
	uint64_t num_allocs;
	uint64_t num_frees;
	uint64_t total_bytes;
	uint64_t total_allocated_bytes;
	uint64_t largest_alloc_size;
	int64_t bytes_in_use;
	int64_t allocated_bytes_in_use;
	int64_t peak_bytes_in_use;
	int64_t peak_allocated_bytes_in_use;
} tfa_res_stats_t;

enum tfa_res_state_e {
	TFA_RES_FREE = 0,    /* never made */
	TFA_RES_LIVE = 1,    /* in its container */
	TFA_RES_DELETED = 2, /* out of its container; its tag and figures remain */
};

typedef struct tfa_resource_s {
	uint32_t tag;
	uint32_t container; /* index into the manager's containers */
	uint64_t type_hash;
	uint32_t refcount;  /* under the manager's lock */
	uint32_t state;     /* enum tfa_res_state_e */
	int64_t bytes_limit; /* 0: none; counts bytes in use on every device */
	int64_t in_use;      /* bytes in use on every device: what the limit sees */
	int64_t peak;        /* the most of in_use */
	uint32_t devices;    /* bit d: something was charged on device code d */
	char name[TFA_RES_NAME_MAX + 1];
	char type_name[TFA_RES_NAME_MAX + 1];
	char debug[TFA_RES_DEBUG_MAX + 1];
	tfa_res_stats_t dev[TFA_RES_DEVICES];
} tfa_resource_t;

/* A resource as the API hands it out: its coordinates and figures at one moment. */
typedef struct tfa_res_info_s {
	uint32_t tag;
	uint32_t refcount;
	uint32_t state;
	uint32_t devices;
	uint64_t type_hash;
	int64_t bytes_limit;
	int64_t memory_used; /* bytes in use, every device */
	int64_t peak;
	char container[TFA_RES_NAME_MAX + 1];
	char name[TFA_RES_NAME_MAX + 1];
	char type_name[TFA_RES_NAME_MAX + 1];
	char debug[TFA_RES_DEBUG_MAX + 1];
} tfa_res_info_t;

/* TensorFlow's ContainerInfo: which container and name a kernel's resource gets. */
typedef struct tfa_res_container_info_s {
	char container[TFA_RES_NAME_MAX + 1];
	char name[TFA_RES_NAME_MAX + 1];
	bool resource_is_private_to_kernel;
} tfa_res_container_info_t;

/* FNV-1a, 64 bits, of a type name: the resource key's type hash. */
uint64_t tfa_res_type_hash(const char *type_name);

/*
 * The checks every name of the API goes through: NULL or empty -> EINVAL,
 * longer than TFA_RES_NAME_MAX -> ENAMETOOLONG.  allow_empty: "" is the
 * default (containers).
 */
int tfa_res_check_name(const char *name, bool allow_empty);

/*
 * create: a new resource (its key must be new: EEXIST) holding the manager's
 * reference only.  lookup: an existing one (ENOENT), with a reference for the
 * caller.  lookup_or_create: either; *created (when not NULL) says which; the
 * caller gets a reference.  debug may be NULL (then "TYPE NAME").
 * *tag receives the resource's tag.  [takes the manager's lock]
 */
int tfa_res_create(const char *container, const char *type_name, const char *name,
		   const char *debug, uint32_t *tag);
int tfa_res_lookup(const char *container, const char *type_name, const char *name, uint32_t *tag);
int tfa_res_lookup_or_create(const char *container, const char *type_name, const char *name,
			     const char *debug, uint32_t *tag, bool *created);

/* A reference more or less.  ENOENT for a tag never made; EINVAL when no reference is left. */
int tfa_res_ref(uint32_t tag);
int tfa_res_unref(uint32_t tag);

/* Delete by key or by tag (the seed's handle): out of the container, the manager's reference dropped. */
int tfa_res_delete(const char *container, const char *type_name, const char *name);
int tfa_res_delete_tag(uint32_t tag);

/*
 * Deletes every resource of the container and the container (ENOENT when it
 * does not exist).  *tags receives up to max_tags of the deleted resources'
 * tags and *ntags their number (the caller looks for their live blocks).
 */
int tfa_res_cleanup(const char *container, uint32_t *tags, size_t max_tags, size_t *ntags);

/* Deletes every resource of every container. */
void tfa_res_clear(void);

/* 0 removes the limit.  ENOENT for an unknown tag. */
int tfa_res_set_limit(uint32_t tag, int64_t bytes_limit);

/* The resource's coordinates and figures.  ENOENT for an unknown tag. */
int tfa_res_info(uint32_t tag, tfa_res_info_t *out);

/* Its figures on one device code (zeros where nothing was charged).  ENOENT for an unknown tag. */
int tfa_res_device_stats(uint32_t tag, unsigned device, tfa_res_stats_t *out);

/* Tags made so far: every valid tag is below this. */
uint32_t tfa_res_tag_end(void);

/* The container's name of a tag's resource (NULL for an unknown tag).  Stable storage. */
const char *tfa_res_container_name(uint32_t tag);

/*
 * ContainerInfo::Init: container_attr, or the default container when empty;
 * shared_name_attr when given (it may not start with '_': EINVAL), else
 * node_name when use_node_name_as_default, else a name private to this
 * process ("_N_NODE").
 */
int tfa_res_container_info(const char *container_attr, const char *shared_name_attr,
			   const char *node_name, bool use_node_name_as_default,
			   tfa_res_container_info_t *out);

/* ---- charging: the allocation path -------------------------------------------------------- */

tfa_resource_t *tfa_res_get(uint32_t tag);

/*
 * Before the backend is asked: bytes more in use for the tag's resource.
 * false when its limit refuses (nothing changed).  A tag that is not a
 * resource is accepted and charged nothing.
 */
bool tfa_res_reserve(uint32_t tag, uint64_t bytes);
/* A reservation whose allocation did not happen. */
void tfa_res_unreserve(uint32_t tag, uint64_t bytes);
/* A reservation past the limit (a realloc that does not grow is never refused). */
void tfa_res_force_reserve(uint32_t tag, uint64_t bytes);
/* The block was made (after a reservation of its bytes): the device's figures. */
void tfa_res_charge(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated);
/* A block charged to the tag was freed: its bytes leave the resource and the device. */
void tfa_res_uncharge(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated);
/* The block was not freed after all (a refused realloc): tfa_res_uncharge undone. */
void tfa_res_undo_uncharge(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated);

/* ---- the process --------------------------------------------------------------------------- */

/* Drops every resource (tests).  Not thread-safe. */
void tfa_res_reset(void);

void tfa_res_prefork(void);
void tfa_res_postfork_parent(void);
void tfa_res_postfork_child(void);

#endif /* TFA_CORE_RESOURCE_MGR_H */
