/* SPDX-License-Identifier: MIT */
/*
 * AllocatorRegistry: allocators by name, priority and device type.  The
 * highest priority wins; on a tie the one registered first.
 *
 * Registrations come from TFA_REGISTER_ALLOCATOR at the bottom of each backend
 * file: a constructor that copies a static entry into a fixed table, so
 * registration never allocates.  An entry's create(ordinal) builds (or finds)
 * the allocator in static storage on first lookup and returns NULL when the
 * backend cannot work here (jemalloc not installed); lookup then moves on to
 * the next priority.
 */
#ifndef TFA_REGISTRY_REGISTRY_H
#define TFA_REGISTRY_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/allocator.h"
#include "core/common.h"
#include "core/log.h"

#define TFA_REGISTRY_MAX       32
#define TFA_REGISTRY_ORDINALS  16

/* Backend ids recorded with each pointer (3 bits).  Tests use the high ones. */
#define TFA_BACKEND_GLIBC    0
#define TFA_BACKEND_JEMALLOC 1
#define TFA_BACKEND_CUDA     2
#define TFA_BACKEND_TEST0    5
#define TFA_BACKEND_TEST1    6
#define TFA_BACKEND_TEST2    7

typedef struct tfa_registration_s {
	const char *name;      /* static storage */
	int priority;
	tfa_device_type_t device;
	tfa_allocator_attrs_t attrs; /* the memory it gives (on_host, gpu_compatible, ...) */
	/* Returns the allocator for a device ordinal, NULL when unavailable. */
	tfa_allocator_t *(*create)(int ordinal);
	/*
	 * A NULL from create() is asked again at the next lookup (the backend may
	 * become available later: CUDA once the program loads libcuda); otherwise
	 * it is final.
	 */
	bool retry_unavailable;
	const char *file;
	int line;
} tfa_registration_t;

/*
 * Copies reg into the registry.  Returns 0, -EEXIST for a duplicate (same
 * device, name and priority), -ENOSPC when full, -EINVAL for a bad entry.
 * [never allocates]
 */
int tfa_registry_register(const tfa_registration_t *reg) TFA_MUST_CHECK;

/* The highest-priority allocator of a device that is available; NULL: none. */
tfa_allocator_t *tfa_registry_get_allocator(tfa_device_type_t device, int ordinal);

/*
 * The highest-priority available allocator of a device whose attributes
 * satisfy `want` (want is equal or less restrictive than the entry's).
 */
tfa_allocator_t *tfa_registry_get_allocator_with_attrs(tfa_device_type_t device, int ordinal,
						       tfa_allocator_attrs_t want);

/* The allocator registered under exactly this name and priority (any device); NULL: none. */
tfa_allocator_t *tfa_registry_get_registered_allocator(const char *name, int priority);

/* The highest-priority available allocator of a device with this name; NULL: none. */
tfa_allocator_t *tfa_registry_find(tfa_device_type_t device, const char *name, int ordinal);

/* Whether any entry of the device has this name (available or not). */
bool tfa_registry_has_name(tfa_device_type_t device, const char *name);

/* "jemalloc, glibc": the device's names by falling priority, distinct.  Returns the length. */
size_t tfa_registry_names(tfa_device_type_t device, char *buf, size_t size);

/* Entries in registration order, for listing. */
size_t tfa_registry_count(void);
const tfa_registration_t *tfa_registry_entry(size_t i);

/* Forgets every entry and instance (tests only). */
void tfa_registry_reset(void);

#define TFA_REGISTER_ALLOCATOR(name, priority, device, attrs, create_fn) \
	TFA_REGISTER_ALLOCATOR_(__COUNTER__, name, priority, device, attrs, create_fn, false)
/* The same, for a backend that may become available later (create() asked again). */
#define TFA_REGISTER_ALLOCATOR_LATE(name, priority, device, attrs, create_fn) \
	TFA_REGISTER_ALLOCATOR_(__COUNTER__, name, priority, device, attrs, create_fn, true)
#define TFA_REGISTER_ALLOCATOR_(ctr, name, priority, device, attrs, create_fn, retry) \
	TFA_REGISTER_ALLOCATOR__(ctr, name, priority, device, attrs, create_fn, retry)
#define TFA_REGISTER_ALLOCATOR__(ctr, name_, priority_, device_, attrs_, create_fn, retry_) \
	__attribute__((constructor(TFA_CTOR_PRIO_REGISTRY))) static void                  \
	tfa_register_allocator_##ctr(void)                                                \
	{                                                                                 \
		static const tfa_registration_t reg = {                                   \
			.name = (name_),                                                  \
			.priority = (priority_),                                          \
			.device = (device_),                                              \
			.attrs = { (attrs_) },                                            \
			.create = (create_fn),                                            \
			.retry_unavailable = (retry_),                                    \
			.file = __FILE__,                                                 \
			.line = __LINE__,                                                 \
		};                                                                        \
		if (tfa_registry_register(&reg) != 0)                                     \
			tfa_log("allocator \"%s\" (%s:%d) not registered: duplicate, "  \
				"bad entry or full registry", reg.name, reg.file, reg.line); \
	}

#endif /* TFA_REGISTRY_REGISTRY_H */
