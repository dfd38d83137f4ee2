/* SPDX-License-Identifier: MIT */
#include "registry/registry.h"

#include <errno.h>
#include <string.h>

#include "core/log.h"
#include "core/lock.h"

struct entry {
	tfa_registration_t reg;
	/* create() results by ordinal; tried: create() was called for it. */
	tfa_allocator_t *instances[TFA_REGISTRY_ORDINALS];
	bool tried[TFA_REGISTRY_ORDINALS];
};

static tfa_lock_t registry_lock = TFA_LOCK_INIT;
static struct entry entries[TFA_REGISTRY_MAX];
static size_t nentries;

int
tfa_registry_register(const tfa_registration_t *reg)
{
	int ret = 0;

	if (reg == NULL || reg->name == NULL || reg->name[0] == '\0' || reg->create == NULL
	    || reg->device < 0 || reg->device >= TFA_DEVICE_TYPE_COUNT)
		return -EINVAL;
	tfa_lock(&registry_lock);
	for (size_t i = 0; i < nentries; i++) {
		const tfa_registration_t *e = &entries[i].reg;
		if (e->device == reg->device && e->priority == reg->priority
		    && strcmp(e->name, reg->name) == 0) {
			ret = -EEXIST;
			goto out_unlock;
		}
	}
	if (nentries == TFA_REGISTRY_MAX) {
		ret = -ENOSPC;
		goto out_unlock;
	}
	memset(&entries[nentries], 0, sizeof(entries[nentries]));
	entries[nentries].reg = *reg;
	nentries++;
out_unlock:
	tfa_unlock(&registry_lock);
	return ret;
}

/*
 * The entry's allocator for an ordinal, creating it on first use.  create()
 * runs outside the lock: it may load a library, which allocates.
 */
static tfa_allocator_t *
instance(size_t i, int ordinal)
{
	if (ordinal < 0 || ordinal >= TFA_REGISTRY_ORDINALS)
		return NULL;
	tfa_lock(&registry_lock);
	struct entry *e = &entries[i];
	bool tried = e->tried[ordinal];
	tfa_allocator_t *a = e->instances[ordinal];
	tfa_allocator_t *(*create)(int) = e->reg.create;
	tfa_unlock(&registry_lock);
	if (tried)
		return a;

	a = create(ordinal);
	tfa_lock(&registry_lock);
	e->instances[ordinal] = a;
	e->tried[ordinal] = a != NULL || !e->reg.retry_unavailable;
	tfa_unlock(&registry_lock);
	return a;
}

/*
 * Walks entries by falling priority (ties: registration order), returning the
 * first available one that matches.
 */
static tfa_allocator_t *
best(tfa_device_type_t device, int ordinal, const char *name, const tfa_allocator_attrs_t *want)
{
	bool skipped[TFA_REGISTRY_MAX] = { false };

	for (;;) {
		size_t pick = SIZE_MAX;

		tfa_lock(&registry_lock);
		for (size_t i = 0; i < nentries; i++) {
			const tfa_registration_t *r = &entries[i].reg;
			if (skipped[i] || r->device != device)
				continue;
			if (name != NULL && strcmp(r->name, name) != 0)
				continue;
			if (want != NULL && !tfa_attrs_is_equal_or_less_restrictive_than(*want, r->attrs))
				continue;
			if (pick == SIZE_MAX || r->priority > entries[pick].reg.priority)
				pick = i;
		}
		tfa_unlock(&registry_lock);
		if (pick == SIZE_MAX)
			return NULL;
		tfa_allocator_t *a = instance(pick, ordinal);
		if (a != NULL)
			return a;
		skipped[pick] = true;
	}
}

tfa_allocator_t *
tfa_registry_get_allocator(tfa_device_type_t device, int ordinal)
{
	return best(device, ordinal, NULL, NULL);
}

tfa_allocator_t *
tfa_registry_get_allocator_with_attrs(tfa_device_type_t device, int ordinal,
				      tfa_allocator_attrs_t want)
{
	return best(device, ordinal, NULL, &want);
}

tfa_allocator_t *
tfa_registry_find(tfa_device_type_t device, const char *name, int ordinal)
{
	if (name == NULL)
		return NULL;
	return best(device, ordinal, name, NULL);
}

tfa_allocator_t *
tfa_registry_get_registered_allocator(const char *name, int priority)
{
	size_t pick = SIZE_MAX;

	if (name == NULL)
		return NULL;
	tfa_lock(&registry_lock);
	for (size_t i = 0; i < nentries; i++) {
		if (entries[i].reg.priority == priority && strcmp(entries[i].reg.name, name) == 0) {
			pick = i;
			break;
		}
	}
	tfa_unlock(&registry_lock);
	return pick == SIZE_MAX ? NULL : instance(pick, 0);
}

bool
tfa_registry_has_name(tfa_device_type_t device, const char *name)
{
	bool found = false;

	if (name == NULL)
		return false;
	tfa_lock(&registry_lock);
	for (size_t i = 0; i < nentries && !found; i++)
		found = entries[i].reg.device == device && strcmp(entries[i].reg.name, name) == 0;
	tfa_unlock(&registry_lock);
	return found;
}

size_t
tfa_registry_names(tfa_device_type_t device, char *buf, size_t size)
{
	bool listed[TFA_REGISTRY_MAX] = { false };
	size_t len = 0;

	if (size > 0)
		buf[0] = '\0';
	tfa_lock(&registry_lock);
	for (;;) {
		size_t pick = SIZE_MAX;
		for (size_t i = 0; i < nentries; i++) {
			if (listed[i] || entries[i].reg.device != device)
				continue;
			if (pick == SIZE_MAX || entries[i].reg.priority > entries[pick].reg.priority)
				pick = i;
		}
		if (pick == SIZE_MAX)
			break;
		/* A name registered at several priorities is listed once. */
		for (size_t i = 0; i < nentries; i++)
			if (entries[i].reg.device == device
			    && strcmp(entries[i].reg.name, entries[pick].reg.name) == 0)
				listed[i] = true;
		len += tfa_snprintf(buf + TFA_MIN(len, size), size - TFA_MIN(len, size), "%s%s",
				    len == 0 ? "" : ", ", entries[pick].reg.name);
	}
	tfa_unlock(&registry_lock);
	return len;
}

size_t
tfa_registry_count(void)
{
	return __atomic_load_n(&nentries, __ATOMIC_RELAXED);
}

const tfa_registration_t *
tfa_registry_entry(size_t i)
{
	return i < tfa_registry_count() ? &entries[i].reg : NULL;
}

void
tfa_registry_reset(void)
{
	tfa_lock(&registry_lock);
	memset(entries, 0, sizeof(entries));
	nentries = 0;
	tfa_unlock(&registry_lock);
}
