/* SPDX-License-Identifier: MIT */
/*
 * tfalloc.h: the control API of tfalloc, for programs that want to say who
 * owns their memory.
 *
 * A resource is named by a container, a type and a name (TensorFlow's
 * ResourceMgr).  While a resource is current on a thread (tfalloc_scope_enter),
 * every allocation the thread makes, on the host or a device, is charged to
 * it: the profile and `tfalloc report` show memory by container and resource,
 * a resource may carry a bytes limit, and cleaning up a container reports what
 * its resources still hold (a scoped leak check).
 *
 * Header only: nothing to link.  The first call looks for libtfalloc.so in
 * the process (dlsym of "tfalloc_control_api"; glibc 2.34 and later have
 * dlsym in libc, older ones need -ldl).  A program run without the shim gets
 * TFALLOC_ENOTACTIVE from every call, at the cost of a load and a branch.
 *
 *   #include <tfalloc.h>
 *   tfalloc_scope_enter("requests", "parse");
 *   ... every malloc and new here is charged to requests/parse ...
 *   tfalloc_scope_exit();
 *
 * Every function returns TFALLOC_OK (0) or a negative TFALLOC_E* code and
 * never crashes on bad arguments (NULL or overlong names, unbalanced scope
 * exits, unknown resources).  Names are at most TFALLOC_NAME_MAX bytes.
 * Thread-safe; async-signal-safe: none.
 */
#ifndef TFALLOC_H
#define TFALLOC_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TFALLOC_API_VERSION 1
#define TFALLOC_NAME_MAX    127
#define TFALLOC_DEBUG_MAX   255

enum tfalloc_error {
	TFALLOC_OK = 0,
	TFALLOC_ENOTACTIVE = -1,   /* the program does not run under tfalloc: nothing done */
	TFALLOC_EINVAL = -2,       /* NULL or empty name, bad argument, no reference left */
	TFALLOC_ENAMETOOLONG = -3, /* a name longer than TFALLOC_NAME_MAX */
	TFALLOC_ENOENT = -4,       /* no such resource, container, device or pointer */
	TFALLOC_EEXIST = -5,       /* create: the resource exists */
	TFALLOC_ESCOPE = -6,       /* scope exit without an enter, or scopes nested too deep */
	TFALLOC_ENOMEM = -7,       /* tfalloc's own tables are full */
	TFALLOC_EIO = -8,          /* the profile could not be written */
};

/* TensorFlow's ResourceHandle: where a resource is and what it is. */
typedef struct tfalloc_resource_handle {
	uint32_t id;        /* the resource's tag in profiles; 0 in a handle that names nothing */
	uint32_t reserved;
	uint64_t hash_code; /* of the type name (FNV-1a 64, stable across runs) */
	char device[16];    /* "cpu": where the resource lives (its memory may be on any device) */
	char container[TFALLOC_NAME_MAX + 1];
	char name[TFALLOC_NAME_MAX + 1];
	char maybe_type_name[TFALLOC_NAME_MAX + 1];
} tfalloc_resource_handle_t;

/* AllocatorStats, for a device or for what was charged to a resource on a device. */
typedef struct tfalloc_stats {
	uint64_t num_allocs;
	uint64_t num_frees;
	uint64_t bytes_in_use;
	uint64_t peak_bytes_in_use;
	uint64_t largest_alloc_size;
	uint64_t total_bytes;
	uint64_t bytes_limit; /* 0: none */
	uint64_t allocated_bytes_in_use;
	uint64_t peak_allocated_bytes_in_use;
	uint64_t total_allocated_bytes;
} tfalloc_stats_t;

typedef struct tfalloc_resource_info {
	tfalloc_resource_handle_t handle;
	uint32_t refcount; /* the manager's reference, lookups', scopes' */
	int deleted;       /* out of its container (its figures remain) */
	uint64_t memory_used; /* bytes in use now, every device */
	uint64_t peak_memory_used;
	uint64_t bytes_limit;
	char debug_string[TFALLOC_DEBUG_MAX + 1];
} tfalloc_resource_info_t;

/* What a container still held when it was cleaned up. */
typedef struct tfalloc_cleanup_result {
	uint64_t blocks; /* live allocations charged to the container's resources */
	uint64_t bytes;  /* their requested bytes */
	uint32_t resources; /* resources deleted */
} tfalloc_cleanup_result_t;

/* The TrackingAllocator's answers about one live pointer. */
typedef struct tfalloc_pointer_info {
	uint64_t requested_size;
	uint64_t allocated_size;
	uint64_t allocation_id;
	uint32_t resource_id; /* 0: charged to no resource */
	char device[16];
} tfalloc_pointer_info_t;

/* TensorFlow's ContainerInfo. */
typedef struct tfalloc_container_info {
	char container[TFALLOC_NAME_MAX + 1];
	char name[TFALLOC_NAME_MAX + 1];
	int resource_is_private_to_kernel;
} tfalloc_container_info_t;

/* What libtfalloc.so exports; later versions only add members at the end. */
struct tfalloc_api {
	uint32_t version;
	uint32_t size; /* sizeof(struct tfalloc_api) of the library */
	int (*scope_enter)(const char *container, const char *name);
	int (*scope_enter_handle)(const tfalloc_resource_handle_t *h);
	int (*scope_exit)(void);
	int (*resource_create)(const char *container, const char *type, const char *name,
			       const char *debug_string, tfalloc_resource_handle_t *out);
	int (*resource_lookup)(const char *container, const char *type, const char *name,
			       tfalloc_resource_handle_t *out);
	int (*resource_lookup_or_create)(const char *container, const char *type, const char *name,
					 const char *debug_string, tfalloc_resource_handle_t *out,
					 int *created);
	int (*resource_unref)(const tfalloc_resource_handle_t *h);
	int (*resource_delete)(const char *container, const char *type, const char *name);
	int (*resource_delete_handle)(const tfalloc_resource_handle_t *h);
	int (*resource_info)(const tfalloc_resource_handle_t *h, tfalloc_resource_info_t *out);
	int (*resource_set_limit)(const tfalloc_resource_handle_t *h, uint64_t bytes_limit);
	int (*resource_stats)(const tfalloc_resource_handle_t *h, const char *device, tfalloc_stats_t *out);
	int (*container_cleanup)(const char *container, tfalloc_cleanup_result_t *out);
	int (*clear)(void);
	int (*container_info)(const char *container_attr, const char *shared_name_attr,
			      const char *node_name, int use_node_name_as_default,
			      tfalloc_container_info_t *out);
	int (*device_stats)(const char *device, tfalloc_stats_t *out);
	int (*dump_profile)(char *path_out, size_t path_size);
	int (*pointer_info)(const void *ptr, tfalloc_pointer_info_t *out);
};

/* ---- the calls ------------------------------------------------------------------------------- */

/* The library's table, looked up once per translation unit; NULL without the shim. */
static inline const struct tfalloc_api *
tfalloc_api_get(void)
{
	static const struct tfalloc_api *api;
	static int looked;

	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		/* (void *)0 is RTLD_DEFAULT, which <dlfcn.h> hides without _GNU_SOURCE. */
		void *sym = dlsym((void *)0, "tfalloc_control_api");
		const struct tfalloc_api *(*get)(void);
		const struct tfalloc_api *a = NULL;
		memcpy(&get, &sym, sizeof(get));
		if (sym != NULL && (a = get()) != NULL && a->version != TFALLOC_API_VERSION)
			a = NULL;
		__atomic_store_n(&api, a, __ATOMIC_RELAXED);
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&api, __ATOMIC_RELAXED);
}

/* Without the shim an output is zeroed, so that code which ignores the result reads zeros. */
static inline int
tfalloc_inactive(void *out, size_t size)
{
	if (out != NULL)
		memset(out, 0, size);
	return TFALLOC_ENOTACTIVE;
}

/* 1 when the program runs under tfalloc, else 0. */
static inline int
tfalloc_active(void)
{
	return tfalloc_api_get() != NULL;
}

/*
 * Makes container/name (type "scope", made on first use; container "" is the
 * default container) the current resource of this thread until the matching
 * tfalloc_scope_exit.  Scopes nest, up to 64 deep.
 */
static inline int
tfalloc_scope_enter(const char *container, const char *name)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->scope_enter(container, name) : TFALLOC_ENOTACTIVE;
}

/* The same for a resource of any type. */
static inline int
tfalloc_scope_enter_handle(const tfalloc_resource_handle_t *h)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->scope_enter_handle(h) : TFALLOC_ENOTACTIVE;
}

/* Restores the resource that was current before the last enter (TFALLOC_ESCOPE: none). */
static inline int
tfalloc_scope_exit(void)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->scope_exit() : TFALLOC_ENOTACTIVE;
}

/* A new resource (TFALLOC_EEXIST when the key is taken), owned by the manager. */
static inline int
tfalloc_resource_create(const char *container, const char *type, const char *name,
			const char *debug_string, tfalloc_resource_handle_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_create(container, type, name, debug_string, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/* An existing resource, with a reference for the caller (tfalloc_resource_unref). */
static inline int
tfalloc_resource_lookup(const char *container, const char *type, const char *name,
			tfalloc_resource_handle_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_lookup(container, type, name, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/* Looks up, or creates; either way with a reference for the caller.  created may be NULL. */
static inline int
tfalloc_resource_lookup_or_create(const char *container, const char *type, const char *name,
				  const char *debug_string, tfalloc_resource_handle_t *out, int *created)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_lookup_or_create(container, type, name, debug_string, out, created)
		 : tfalloc_inactive(out, sizeof(*out));
}

static inline int
tfalloc_resource_unref(const tfalloc_resource_handle_t *h)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_unref(h) : TFALLOC_ENOTACTIVE;
}

/* Out of its container; its memory stays charged to it and shows in the report. */
static inline int
tfalloc_resource_delete(const char *container, const char *type, const char *name)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_delete(container, type, name) : TFALLOC_ENOTACTIVE;
}

static inline int
tfalloc_resource_delete_handle(const tfalloc_resource_handle_t *h)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_delete_handle(h) : TFALLOC_ENOTACTIVE;
}

/* Refcount, debug string, memory used (bytes in use on every device), limit. */
static inline int
tfalloc_resource_info(const tfalloc_resource_handle_t *h, tfalloc_resource_info_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_info(h, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/*
 * Allocations charged to the resource that would take its memory used past
 * bytes_limit fail as out of memory (malloc: NULL and ENOMEM; new:
 * std::bad_alloc).  0 removes the limit.
 */
static inline int
tfalloc_resource_set_limit(const tfalloc_resource_handle_t *h, uint64_t bytes_limit)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_set_limit(h, bytes_limit) : TFALLOC_ENOTACTIVE;
}

/* What was charged to the resource on one device ("cpu", "cuda:0", ...). */
static inline int
tfalloc_resource_stats(const tfalloc_resource_handle_t *h, const char *device, tfalloc_stats_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->resource_stats(h, device, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/*
 * Deletes every resource of the container, and the container.  Every
 * allocation still charged to them is reported (stderr, and the profile);
 * out (may be NULL) receives their count and bytes.
 */
static inline int
tfalloc_container_cleanup(const char *container, tfalloc_cleanup_result_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->container_cleanup(container, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/* Deletes every resource of every container. */
static inline int
tfalloc_clear(void)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->clear() : TFALLOC_ENOTACTIVE;
}

/*
 * ContainerInfo: container_attr, or the default container when it is "";
 * shared_name_attr when not "" (it may not start with '_'), else node_name
 * when use_node_name_as_default, else a name private to this process.
 */
static inline int
tfalloc_container_info_init(const char *container_attr, const char *shared_name_attr,
			    const char *node_name, int use_node_name_as_default,
			    tfalloc_container_info_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->container_info(container_attr, shared_name_attr, node_name,
				     use_node_name_as_default, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/* AllocatorStats of a device: "cpu" (and "cuda:0", ... where CUDA is tracked). */
static inline int
tfalloc_device_stats(const char *device, tfalloc_stats_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->device_stats(device, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/* Writes the profile now (a snapshot); path_out (may be NULL) receives its path. */
static inline int
tfalloc_dump_profile(char *path_out, size_t path_size)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->dump_profile(path_out, path_size) : TFALLOC_ENOTACTIVE;
}

/*
 * Requested size, allocated size and allocation id of a live pointer tfalloc
 * handed out.  With sample-only tracking (TFALLOC_TRACK=sampled) only the
 * recorded blocks (sampled, or charged to a resource) are known: the others
 * give TFALLOC_ENOENT.
 */
static inline int
tfalloc_pointer_info(const void *ptr, tfalloc_pointer_info_t *out)
{
	const struct tfalloc_api *a = tfalloc_api_get();
	return a ? a->pointer_info(ptr, out)
		 : tfalloc_inactive(out, sizeof(*out));
}

/* A message for an error code. */
static inline const char *
tfalloc_strerror(int err)
{
	switch (err) {
	case TFALLOC_OK: return "ok";
	case TFALLOC_ENOTACTIVE: return "tfalloc is not active in this process";
	case TFALLOC_EINVAL: return "invalid argument";
	case TFALLOC_ENAMETOOLONG: return "name too long";
	case TFALLOC_ENOENT: return "no such resource, container, device or pointer";
	case TFALLOC_EEXIST: return "resource exists";
	case TFALLOC_ESCOPE: return "scope exit without enter, or scopes too deep";
	case TFALLOC_ENOMEM: return "tfalloc's tables are full";
	case TFALLOC_EIO: return "the profile could not be written";
	default: return "unknown error";
	}
}

#ifdef __cplusplus
} /* extern "C" */

namespace tfalloc {

/* A resource current for the lifetime of the object. */
class scope {
public:
	scope(const char *container, const char *name) noexcept
		: err_(tfalloc_scope_enter(container, name)) {}
	explicit scope(const tfalloc_resource_handle_t &h) noexcept : err_(tfalloc_scope_enter_handle(&h)) {}
	~scope() { if (err_ == TFALLOC_OK) tfalloc_scope_exit(); }
	scope(const scope &) = delete;
	scope &operator=(const scope &) = delete;
	/* TFALLOC_OK, or why the scope is not in force (TFALLOC_ENOTACTIVE without the shim). */
	int error() const noexcept { return err_; }

private:
	int err_;
};

} /* namespace tfalloc */
#endif

#endif /* TFALLOC_H */
