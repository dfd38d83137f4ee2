/* SPDX-License-Identifier: MIT */
/*
 * registry/registry.h: priority rules, duplicates, bad entries, a full table,
 * lookups by name and priority, unavailable allocators, attribute matching,
 * the TFA_REGISTER_ALLOCATOR macro, and the built-in host allocators.
 *
 * Tests of the rules call tfa_registry_reset() first (the "rules" fixture)
 * and register their own entries; the "builtin" and "macro" cases look at the
 * registry as the constructors left it.
 */
#include "registry/registry.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/backends.h"
#include "test/support/exact_backend.h"

#if defined(__SANITIZE_ADDRESS__)
#	define TFA_TEST_ASAN 1
#elif defined(__has_feature)
#	if __has_feature(address_sanitizer)
#		define TFA_TEST_ASAN 1
#	endif
#endif
#ifndef TFA_TEST_ASAN
#	define TFA_TEST_ASAN 0
#endif

/* ---- allocators for test entries ---------------------------------------------------------- */

static tfa_test_backend_t alloc_a, alloc_b, alloc_c, alloc_d;
static tfa_test_backend_t per_ordinal[TFA_REGISTRY_ORDINALS];
static int create_calls[8];
static int last_ordinal = -1;

static tfa_allocator_t *
make(tfa_test_backend_t *tb, int which, int ordinal)
{
	create_calls[which]++;
	last_ordinal = ordinal;
	if (tb->base.ops == NULL)
		tfa_test_backend_init_exact(tb);
	return &tb->base;
}

static tfa_allocator_t *
create_a(int ordinal)
{
	return make(&alloc_a, 0, ordinal);
}

static tfa_allocator_t *
create_b(int ordinal)
{
	return make(&alloc_b, 1, ordinal);
}

static tfa_allocator_t *
create_c(int ordinal)
{
	return make(&alloc_c, 2, ordinal);
}

static tfa_allocator_t *
create_d(int ordinal)
{
	return make(&alloc_d, 3, ordinal);
}

/* A backend that cannot work here (jemalloc not installed). */
static tfa_allocator_t *
create_null(int ordinal)
{
	create_calls[4]++;
	last_ordinal = ordinal;
	return NULL;
}

static tfa_allocator_t *
create_by_ordinal(int ordinal)
{
	create_calls[5]++;
	last_ordinal = ordinal;
	if (ordinal < 0 || ordinal >= TFA_REGISTRY_ORDINALS)
		return NULL;
	return make(&per_ordinal[ordinal], 6, ordinal);
}

static tfa_registration_t
entry(const char *name, int priority, tfa_device_type_t device, uint32_t attrs,
      tfa_allocator_t *(*create)(int))
{
	tfa_registration_t r = {
		.name = name,
		.priority = priority,
		.device = device,
		.attrs = { attrs },
		.create = create,
		.file = __FILE__,
		.line = __LINE__,
	};
	return r;
}

static int
reg(const char *name, int priority, tfa_device_type_t device, uint32_t attrs,
    tfa_allocator_t *(*create)(int))
{
	tfa_registration_t r = entry(name, priority, device, attrs, create);
	return tfa_registry_register(&r);
}

static void
reg_ok(const char *name, int priority, tfa_allocator_t *(*create)(int))
{
	ck_assert_int_eq(reg(name, priority, TFA_DEVICE_CPU, TFA_ATTR_ON_HOST, create), 0);
}

static void
reset(void)
{
	tfa_registry_reset();
	memset(create_calls, 0, sizeof(create_calls));
	last_ordinal = -1;
}

/* ---- the macro, at file scope, on a device the built-in tests do not look at ------------- */

static tfa_test_backend_t macro_backend;

static tfa_allocator_t *
create_macro(int ordinal)
{
	if (ordinal != 0)
		return NULL;
	if (macro_backend.base.ops == NULL)
		tfa_test_backend_init_rounding(&macro_backend);
	return &macro_backend.base;
}

TFA_REGISTER_ALLOCATOR("check-registry-macro", 7, TFA_DEVICE_CUDA,
                       TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE, create_macro)

/* Set by main() before any test runs: the constructor had already registered it. */
static bool macro_registered_before_main;

/* ---- priority rules ----------------------------------------------------------------------- */

START_TEST(test_registry_empty)
{
	char buf[64];

	ck_assert_uint_eq(tfa_registry_count(), 0);
	ck_assert_ptr_null(tfa_registry_entry(0));
	ck_assert_ptr_null(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0));
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CPU, "glibc", 0));
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("jemalloc", 200));
	ck_assert(!tfa_registry_has_name(TFA_DEVICE_CPU, "glibc"));
	memset(buf, 'x', sizeof(buf));
	ck_assert_uint_eq(tfa_registry_names(TFA_DEVICE_CPU, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "");
}
END_TEST

START_TEST(test_registry_highest_priority_wins)
{
	reg_ok("low", 10, create_a);
	reg_ok("high", 30, create_b);
	reg_ok("mid", 20, create_c);
	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0), &alloc_b.base);
	/* A higher one registered later takes over. */
	reg_ok("top", 31, create_d);
	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0), &alloc_d.base);
	/* Negative priorities order too. */
	ck_assert_int_eq(reg("neg", -5, TFA_DEVICE_CUDA, 0, create_a), 0);
	ck_assert_int_eq(reg("neg2", -1, TFA_DEVICE_CUDA, 0, create_c), 0);
	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CUDA, 0), &alloc_c.base);
}
END_TEST

START_TEST(test_registry_tie_first_registered)
{
	reg_ok("x", 50, create_a);
	reg_ok("y", 50, create_b);
	reg_ok("z", 50, create_c);
	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0), &alloc_a.base);
	/* Only the winner was created. */
	ck_assert_int_eq(create_calls[0], 1);
	ck_assert_int_eq(create_calls[1], 0);
	ck_assert_int_eq(create_calls[2], 0);
}
END_TEST

START_TEST(test_registry_duplicates)
{
	reg_ok("dup", 10, create_a);
	/* Same device, name and priority: refused, whatever the create function. */
	ck_assert_int_eq(reg("dup", 10, TFA_DEVICE_CPU, TFA_ATTR_ON_HOST, create_b), -EEXIST);
	ck_assert_int_eq(reg("dup", 10, TFA_DEVICE_CPU, 0, create_a), -EEXIST);
	/* Another priority or another device is another entry. */
	ck_assert_int_eq(reg("dup", 11, TFA_DEVICE_CPU, TFA_ATTR_ON_HOST, create_b), 0);
	ck_assert_int_eq(reg("dup", 10, TFA_DEVICE_CUDA, TFA_ATTR_ON_HOST, create_c), 0);
	ck_assert_uint_eq(tfa_registry_count(), 3);
	/* The name compares by content, not by pointer. */
	static char copy[] = "dup";
	ck_assert_int_eq(reg(copy, 11, TFA_DEVICE_CPU, 0, create_c), -EEXIST);
	ck_assert_uint_eq(tfa_registry_count(), 3);
	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("dup", 10), &alloc_a.base);
	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("dup", 11), &alloc_b.base);
}
END_TEST

START_TEST(test_registry_bad_entries)
{
	ck_assert_int_eq(reg(NULL, 10, TFA_DEVICE_CPU, 0, create_a), -EINVAL);
	ck_assert_int_eq(reg("nocreate", 10, TFA_DEVICE_CPU, 0, NULL), -EINVAL);
	ck_assert_int_eq(reg("baddevice", 10, TFA_DEVICE_TYPE_COUNT, 0, create_a), -EINVAL);
	ck_assert_int_eq(reg("baddevice", 10, (tfa_device_type_t)99, 0, create_a), -EINVAL);
	ck_assert_int_eq(tfa_registry_register(NULL), -EINVAL);
	ck_assert_uint_eq(tfa_registry_count(), 0);
	ck_assert(!tfa_registry_has_name(TFA_DEVICE_CPU, "nocreate"));
}
END_TEST

START_TEST(test_registry_full)
{
	static char names[TFA_REGISTRY_MAX + 1][16];

	for (int i = 0; i <= TFA_REGISTRY_MAX; i++)
		snprintf(names[i], sizeof(names[i]), "entry%d", i);
	for (int i = 0; i < TFA_REGISTRY_MAX; i++)
		ck_assert_int_eq(reg(names[i], i, TFA_DEVICE_CPU, 0, create_a), 0);
	ck_assert_uint_eq(tfa_registry_count(), TFA_REGISTRY_MAX);
	ck_assert_int_eq(reg(names[TFA_REGISTRY_MAX], 1000, TFA_DEVICE_CPU, 0, create_b), -ENOSPC);
	ck_assert_uint_eq(tfa_registry_count(), TFA_REGISTRY_MAX);
	/* A duplicate in a full table is still a duplicate. */
	ck_assert_int_eq(reg(names[0], 0, TFA_DEVICE_CPU, 0, create_a), -EEXIST);
	ck_assert(!tfa_registry_has_name(TFA_DEVICE_CPU, names[TFA_REGISTRY_MAX]));
	ck_assert_ptr_eq(tfa_registry_entry(TFA_REGISTRY_MAX - 1)->name,
	                 names[TFA_REGISTRY_MAX - 1]);
	ck_assert_ptr_null(tfa_registry_entry(TFA_REGISTRY_MAX));

	/* reset empties it. */
	tfa_registry_reset();
	ck_assert_uint_eq(tfa_registry_count(), 0);
	ck_assert_int_eq(reg(names[TFA_REGISTRY_MAX], 1000, TFA_DEVICE_CPU, 0, create_b), 0);
}
END_TEST

START_TEST(test_registry_get_registered_allocator)
{
	reg_ok("alpha", 10, create_a);
	reg_ok("beta", 20, create_b);
	ck_assert_int_eq(reg("gamma", 30, TFA_DEVICE_CUDA, 0, create_c), 0);

	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("alpha", 10), &alloc_a.base);
	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("beta", 20), &alloc_b.base);
	/* Any device. */
	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("gamma", 30), &alloc_c.base);
	/* Missing name, wrong priority. */
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("delta", 10));
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("alpha", 20));
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("alpha", 11));
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("", 10));
	ck_assert_ptr_null(tfa_registry_get_registered_allocator(NULL, 10));
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("alph", 10));
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("alphabet", 10));
}
END_TEST

START_TEST(test_registry_unavailable_falls_through)
{
	reg_ok("jem", 100, create_null);
	reg_ok("glib", 50, create_a);
	reg_ok("worst", 10, create_b);

	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0), &alloc_a.base);
	ck_assert_int_ge(create_calls[4], 1);
	ck_assert_ptr_null(tfa_registry_get_registered_allocator("jem", 100));
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CPU, "jem", 0));
	/* Unavailable, but registered: the name is known. */
	ck_assert(tfa_registry_has_name(TFA_DEVICE_CPU, "jem"));

	/* Nothing available at all. */
	tfa_registry_reset();
	reg_ok("none1", 5, create_null);
	reg_ok("none2", 6, create_null);
	ck_assert_ptr_null(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0));
}
END_TEST

START_TEST(test_registry_create_once_per_ordinal)
{
	reg_ok("ord", 10, create_by_ordinal);

	tfa_allocator_t *a0 = tfa_registry_get_allocator(TFA_DEVICE_CPU, 0);
	ck_assert_ptr_eq(a0, &per_ordinal[0].base);
	ck_assert_int_eq(last_ordinal, 0);
	tfa_allocator_t *a3 = tfa_registry_get_allocator(TFA_DEVICE_CPU, 3);
	ck_assert_ptr_eq(a3, &per_ordinal[3].base);
	ck_assert_int_eq(last_ordinal, 3);
	ck_assert_int_eq(create_calls[5], 2);

	/* Instances are kept: further lookups do not create again. */
	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0), a0);
	ck_assert_ptr_eq(tfa_registry_find(TFA_DEVICE_CPU, "ord", 3), a3);
	ck_assert_int_eq(create_calls[5], 2);

	/* An unavailable ordinal is remembered too, and out-of-range ones fail. */
	ck_assert_ptr_null(tfa_registry_get_allocator(TFA_DEVICE_CPU, -1));
	ck_assert_ptr_null(tfa_registry_get_allocator(TFA_DEVICE_CPU, TFA_REGISTRY_ORDINALS));

	/* reset forgets instances as well as entries. */
	reset();
	reg_ok("ord", 10, create_by_ordinal);
	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0), a0);
	ck_assert_int_eq(create_calls[5], 1);
}
END_TEST

START_TEST(test_registry_find)
{
	reg_ok("same", 10, create_a);
	reg_ok("same", 20, create_b);
	reg_ok("other", 30, create_c);
	ck_assert_int_eq(reg("gpu", 40, TFA_DEVICE_CUDA, 0, create_d), 0);

	/* The highest priority of that name. */
	ck_assert_ptr_eq(tfa_registry_find(TFA_DEVICE_CPU, "same", 0), &alloc_b.base);
	ck_assert_ptr_eq(tfa_registry_find(TFA_DEVICE_CPU, "other", 0), &alloc_c.base);
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CPU, "missing", 0));
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CPU, NULL, 0));
	/* Names belong to a device. */
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CPU, "gpu", 0));
	ck_assert_ptr_eq(tfa_registry_find(TFA_DEVICE_CUDA, "gpu", 0), &alloc_d.base);
	ck_assert(tfa_registry_has_name(TFA_DEVICE_CUDA, "gpu"));
	ck_assert(!tfa_registry_has_name(TFA_DEVICE_CPU, "gpu"));
	ck_assert(!tfa_registry_has_name(TFA_DEVICE_CPU, NULL));

	/* The higher "same" unavailable: the lower one is found. */
	tfa_registry_reset();
	reg_ok("same", 20, create_null);
	reg_ok("same", 10, create_a);
	ck_assert_ptr_eq(tfa_registry_find(TFA_DEVICE_CPU, "same", 0), &alloc_a.base);
}
END_TEST

START_TEST(test_registry_names)
{
	char buf[128];

	reg_ok("b", 10, create_a);
	reg_ok("a", 20, create_b);
	reg_ok("a", 5, create_c); /* listed once */
	ck_assert_int_eq(reg("cuda-only", 99, TFA_DEVICE_CUDA, 0, create_d), 0);

	ck_assert_uint_eq(tfa_registry_names(TFA_DEVICE_CPU, buf, sizeof(buf)), 4);
	ck_assert_str_eq(buf, "a, b");
	ck_assert_uint_eq(tfa_registry_names(TFA_DEVICE_CUDA, buf, sizeof(buf)), 9);
	ck_assert_str_eq(buf, "cuda-only");

	/* Too small a buffer: cut and terminated, the full length returned. */
	memset(buf, 'x', sizeof(buf));
	ck_assert_uint_eq(tfa_registry_names(TFA_DEVICE_CPU, buf, 3), 4);
	ck_assert_uint_eq(strlen(buf), 2);
	ck_assert_str_eq(buf, "a,");

	/* Registration order is kept in the entry list. */
	ck_assert_uint_eq(tfa_registry_count(), 4);
	ck_assert_str_eq(tfa_registry_entry(0)->name, "b");
	ck_assert_str_eq(tfa_registry_entry(1)->name, "a");
	ck_assert_int_eq(tfa_registry_entry(1)->priority, 20);
	ck_assert_int_eq(tfa_registry_entry(3)->device, TFA_DEVICE_CUDA);
	ck_assert_ptr_null(tfa_registry_entry(4));
}
END_TEST

/* ---- attributes --------------------------------------------------------------------------- */

static tfa_allocator_attrs_t
want(uint32_t v)
{
	tfa_allocator_attrs_t a = { v };
	return a;
}

START_TEST(test_registry_attrs_pinned)
{
	const uint32_t pinned = TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE;

	/* Only a pinned entry: it serves pinned and plain host requests. */
	ck_assert_int_eq(reg("pinned", 10, TFA_DEVICE_CPU, pinned, create_a), 0);
	ck_assert_ptr_eq(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, want(pinned)),
	                 &alloc_a.base);
	ck_assert_ptr_eq(
	        tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, want(TFA_ATTR_ON_HOST)),
	        &alloc_a.base);
	ck_assert_ptr_eq(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, want(0)),
	                 &alloc_a.base);
	ck_assert_ptr_null(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0,
	                                                         want(TFA_ATTR_NIC_COMPATIBLE)));
	ck_assert_ptr_null(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0,
	                                                         want(pinned | 0x01000000u)));
}
END_TEST

START_TEST(test_registry_attrs_host_only)
{
	/* Only a plain host entry: it cannot serve GPU-compatible requests. */
	ck_assert_int_eq(reg("host", 10, TFA_DEVICE_CPU, TFA_ATTR_ON_HOST, create_a), 0);
	ck_assert_ptr_null(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0,
	                                                         want(TFA_ATTR_GPU_COMPATIBLE)));
	ck_assert_ptr_null(tfa_registry_get_allocator_with_attrs(
	        TFA_DEVICE_CPU, 0, want(TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE)));
	ck_assert_ptr_eq(
	        tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, want(TFA_ATTR_ON_HOST)),
	        &alloc_a.base);
}
END_TEST

START_TEST(test_registry_attrs_priority)
{
	const uint32_t pinned = TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE;

	ck_assert_int_eq(reg("pinned", 10, TFA_DEVICE_CPU, pinned, create_a), 0);
	ck_assert_int_eq(reg("host", 20, TFA_DEVICE_CPU, TFA_ATTR_ON_HOST, create_b), 0);
	ck_assert_int_eq(reg("pinned-na", 30, TFA_DEVICE_CPU, pinned, create_null), 0);

	/* Highest available priority among the entries that satisfy the request. */
	ck_assert_ptr_eq(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, want(pinned)),
	                 &alloc_a.base);
	ck_assert_ptr_eq(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0,
	                                                       want(TFA_ATTR_GPU_COMPATIBLE)),
	                 &alloc_a.base);
	ck_assert_ptr_eq(
	        tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, want(TFA_ATTR_ON_HOST)),
	        &alloc_b.base);
	ck_assert_ptr_eq(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0), &alloc_b.base);
	/* Another device's entries never match. */
	ck_assert_ptr_null(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CUDA, 0, want(0)));
}
END_TEST

/* ---- the macro and the built-ins (no reset) ---------------------------------------------- */

START_TEST(test_registry_macro_registers)
{
	const tfa_registration_t *found = NULL;

	ck_assert(macro_registered_before_main);
	ck_assert(tfa_registry_has_name(TFA_DEVICE_CUDA, "check-registry-macro"));
	for (size_t i = 0; i < tfa_registry_count(); i++) {
		const tfa_registration_t *e = tfa_registry_entry(i);
		if (strcmp(e->name, "check-registry-macro") == 0)
			found = e;
	}
	ck_assert_ptr_nonnull(found);
	ck_assert_int_eq(found->priority, 7);
	ck_assert_int_eq(found->device, TFA_DEVICE_CUDA);
	ck_assert_uint_eq(found->attrs.value, TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE);
	ck_assert_ptr_eq(found->create, create_macro);
	ck_assert_ptr_nonnull(found->file);
	ck_assert_ptr_nonnull(strstr(found->file, "check_registry.c"));
	ck_assert_int_gt(found->line, 0);

	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("check-registry-macro", 7),
	                 &macro_backend.base);
	ck_assert_ptr_eq(tfa_registry_find(TFA_DEVICE_CUDA, "check-registry-macro", 0),
	                 &macro_backend.base);
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CUDA, "check-registry-macro", 1));
	/* It does not leak onto the CPU. */
	ck_assert(!tfa_registry_has_name(TFA_DEVICE_CPU, "check-registry-macro"));
}
END_TEST

static const tfa_registration_t *
builtin(const char *name)
{
	for (size_t i = 0; i < tfa_registry_count(); i++) {
		const tfa_registration_t *e = tfa_registry_entry(i);
		if (e->device == TFA_DEVICE_CPU && strcmp(e->name, name) == 0)
			return e;
	}
	return NULL;
}

START_TEST(test_registry_builtin_entries)
{
	char buf[256];
	const tfa_registration_t *je = builtin("jemalloc");
	const tfa_registration_t *gl = builtin("glibc");

	ck_assert_ptr_nonnull(je);
	ck_assert_ptr_nonnull(gl);
	ck_assert(tfa_registry_has_name(TFA_DEVICE_CPU, "jemalloc"));
	ck_assert(tfa_registry_has_name(TFA_DEVICE_CPU, "glibc"));
	ck_assert_int_gt(je->priority, gl->priority);
	ck_assert(tfa_attrs_on_host(je->attrs));
	ck_assert(tfa_attrs_on_host(gl->attrs));

	tfa_registry_names(TFA_DEVICE_CPU, buf, sizeof(buf));
	ck_assert_msg(strncmp(buf, "jemalloc, glibc", 15) == 0, "names: \"%s\"", buf);

	ck_assert_int_eq(access("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", F_OK), 0);
	tfa_allocator_t *def = tfa_registry_get_allocator(TFA_DEVICE_CPU, 0);
	ck_assert_ptr_nonnull(def);
	ck_assert_str_eq(tfa_allocator_name(def), "jemalloc");
	ck_assert_uint_eq(def->backend_id, TFA_BACKEND_JEMALLOC);
	ck_assert_int_eq(def->device, TFA_DEVICE_CPU);
	ck_assert_ptr_eq(tfa_registry_find(TFA_DEVICE_CPU, "jemalloc", 0), def);
	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("jemalloc", je->priority), def);

	tfa_allocator_t *g = tfa_registry_find(TFA_DEVICE_CPU, "glibc", 0);
	ck_assert_ptr_nonnull(g);
	ck_assert_str_eq(tfa_allocator_name(g), "glibc");
	ck_assert_uint_eq(g->backend_id, TFA_BACKEND_GLIBC);
	ck_assert_ptr_eq(tfa_registry_get_registered_allocator("glibc", gl->priority), g);
	ck_assert_ptr_eq(
	        tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, want(TFA_ATTR_ON_HOST)),
	        def);
}
END_TEST

/* The CUDA entries: unavailable without a driver table; with one, a "cuda"
 * allocator per ordinal, and "cuda_host" for on_host | gpu_compatible. */
static int fake_devices = 2;
static int fake_allocs[3], fake_frees[3];
static int fake_last_ordinal = -1;

static bool
fake_available(void)
{
	return true;
}

static int
fake_count(void)
{
	return fake_devices;
}

static int
fake_alloc(int ordinal, size_t n, void **out)
{
	fake_last_ordinal = ordinal;
	fake_allocs[0]++;
	*out = malloc(n);
	return *out != NULL ? 0 : 2;
}

static int
fake_free(void *p)
{
	fake_frees[0]++;
	free(p);
	return 0;
}

static int
fake_alloc_host(size_t n, void **out)
{
	fake_allocs[1]++;
	*out = malloc(n);
	return *out != NULL ? 0 : 2;
}

static int
fake_free_host(void *p)
{
	fake_frees[1]++;
	free(p);
	return 0;
}

static const tfa_cuda_backend_t fake_cuda = {
	.available = fake_available,
	.device_count = fake_count,
	.alloc = fake_alloc,
	.free = fake_free,
	.alloc_host = fake_alloc_host,
	.free_host = fake_free_host,
};

START_TEST(test_registry_cuda_entries)
{
	const tfa_registration_t *cu = NULL;
	const tfa_registration_t *host = builtin("cuda_host");

	for (size_t i = 0; i < tfa_registry_count(); i++)
		if (tfa_registry_entry(i)->device == TFA_DEVICE_CUDA
		    && strcmp(tfa_registry_entry(i)->name, "cuda") == 0)
			cu = tfa_registry_entry(i);
	tfa_allocator_attrs_t pinned = want(TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE);

	ck_assert_ptr_nonnull(cu);
	ck_assert_ptr_nonnull(host);
	ck_assert_int_eq(cu->device, TFA_DEVICE_CUDA);
	ck_assert_int_eq(host->device, TFA_DEVICE_CPU);
	/* Never the default host allocator. */
	ck_assert_int_lt(host->priority, builtin("glibc")->priority);
	ck_assert_str_eq(tfa_allocator_name(tfa_registry_get_allocator(TFA_DEVICE_CPU, 0)), "jemalloc");

	/* No driver table (no shim, no libcuda): unavailable. */
	tfa_cuda_backend = NULL;
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CUDA, "cuda", 0));
	ck_assert_ptr_null(tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, pinned));

	tfa_cuda_backend = &fake_cuda;
	tfa_allocator_t *d0 = tfa_registry_find(TFA_DEVICE_CUDA, "cuda", 0);
	tfa_allocator_t *d1 = tfa_registry_find(TFA_DEVICE_CUDA, "cuda", 1);
	ck_assert_ptr_nonnull(d0);
	ck_assert_ptr_nonnull(d1);
	ck_assert_ptr_ne(d0, d1);
	ck_assert_int_eq(d1->device_ordinal, 1);
	ck_assert_uint_eq(d1->backend_id, TFA_BACKEND_CUDA);
	ck_assert_ptr_null(tfa_registry_find(TFA_DEVICE_CUDA, "cuda", 2)); /* 2 devices */
	void *p = tfa_allocator_allocate_raw(d1, 0, 100, NULL);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(fake_last_ordinal, 1);
	tfa_allocator_deallocate_raw(d1, p);
	ck_assert_int_eq(fake_frees[0], 1);

	tfa_allocator_t *h = tfa_registry_get_allocator_with_attrs(TFA_DEVICE_CPU, 0, pinned);
	ck_assert_ptr_nonnull(h);
	ck_assert_str_eq(tfa_allocator_name(h), "cuda_host");
	/* Plain host memory still comes from the host allocators. */
	ck_assert_str_eq(tfa_allocator_name(tfa_registry_get_allocator_with_attrs(
				 TFA_DEVICE_CPU, 0, want(TFA_ATTR_ON_HOST))),
			 "jemalloc");
	p = tfa_allocator_allocate_raw(h, 0, 64, NULL);
	ck_assert_ptr_nonnull(p);
	tfa_allocator_deallocate_raw(h, p);
	ck_assert_int_eq(fake_allocs[1], 1);
	ck_assert_int_eq(fake_frees[1], 1);
	tfa_cuda_backend = NULL;
}
END_TEST

/* allocate, write, query, resize and free through a built-in; _i picks it. */
START_TEST(test_registry_builtin_allocate)
{
	const char *name = _i == 0 ? "jemalloc" : "glibc";
	tfa_allocator_t *a = tfa_registry_find(TFA_DEVICE_CPU, name, 0);
	tfa_allocation_attrs_t zero = { .zero_fill = true };
	/*
	 * ASan intercepts __libc_memalign (ld.so's TLS uses it) but not
	 * __libc_free: under ASan the glibc backend's aligned blocks come from
	 * ASan's heap and go back to glibc's.  Only a sanitizer build mixes
	 * them; the shim is never built with ASan (STYLE.md rule 41).
	 */
	bool skip_aligned = TFA_TEST_ASAN && _i == 1;

	ck_assert_ptr_nonnull(a);
	static const size_t sizes[] = { 1, 8, 24, 100, 4096, 100000, 3u << 20 };
	for (size_t k = 0; k < TFA_ARRAY_SIZE(sizes); k++) {
		size_t n = sizes[k];
		unsigned char *p = tfa_allocator_allocate_raw(a, 0, n, NULL);
		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % 16, 0);
		memset(p, 0xa5, n);
		ck_assert_uint_ge(tfa_allocator_good_size(a, n, 0), n);
		tfa_allocator_deallocate_raw(a, p);

		for (size_t align = 32; align <= 4096 && !skip_aligned; align *= 8) {
			p = tfa_allocator_allocate_raw(a, align, n, NULL);
			ck_assert_ptr_nonnull(p);
			ck_assert_uint_eq((uintptr_t)p % align, 0);
			memset(p, 0x5a, n);
			tfa_allocator_deallocate_raw_sized(a, p, n, align);
		}

		p = tfa_allocator_allocate_raw(a, 0, n, &zero);
		ck_assert_ptr_nonnull(p);
		for (size_t i = 0; i < n; i++)
			if (p[i] != 0)
				ck_abort_msg("%s: zero_fill byte %zu of %zu is %u", name, i, n,
				             p[i]);
		tfa_allocator_deallocate_raw_sized(a, p, n, 0);
	}

	/* realloc keeps contents both ways. */
	unsigned char *p = tfa_allocator_allocate_raw(a, 0, 100, NULL);
	for (int i = 0; i < 100; i++)
		p[i] = (unsigned char)i;
	p = tfa_allocator_reallocate_raw(a, p, 100, 100000, 0);
	ck_assert_ptr_nonnull(p);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(p[i], (unsigned char)i);
	p = tfa_allocator_reallocate_raw(a, p, 100000, 10, 0);
	ck_assert_ptr_nonnull(p);
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(p[i], (unsigned char)i);
	tfa_allocator_deallocate_raw(a, p);
}
END_TEST

/*
 * The allocated size of a built-in's pointer, asked of the allocator the
 * registry hands out (no other set-up): never below the request, nor below
 * what good_size promised.
 */
START_TEST(test_registry_builtin_sizes_sane)
{
	const char *name = _i == 0 ? "jemalloc" : "glibc";
	tfa_allocator_t *a = tfa_registry_find(TFA_DEVICE_CPU, name, 0);

	ck_assert_ptr_nonnull(a);
	for (size_t n = 1; n < 5000; n += (n < 64 ? 1 : n / 8)) {
		void *p = tfa_allocator_allocate_raw(a, 0, n, NULL);
		ck_assert_ptr_nonnull(p);
		size_t good = tfa_allocator_good_size(a, n, 0);
		size_t slow = tfa_allocator_allocated_size_slow(a, p);
		ck_assert_msg(good >= n, "%s: good_size(%zu) = %zu", name, n, good);
		ck_assert_msg(slow >= n, "%s: allocated_size_slow of a %zu-byte block = %zu", name,
		              n, slow);
		/*
		 * jemalloc's size classes make them equal; glibc may hand out a
		 * free chunk a little larger than the request needs.
		 */
		if (_i == 0)
			ck_assert_msg(slow == good,
			              "%s: %zu bytes: good_size %zu, allocated_size_slow %zu", name,
			              n, good, slow);
		else
			ck_assert_msg(slow >= good,
			              "%s: %zu bytes: good_size %zu, allocated_size_slow %zu", name,
			              n, good, slow);
		tfa_allocator_deallocate_raw(a, p);
	}
	if (_i != 0)
		return;
	/*
	 * Every entry of jemalloc's table of small usable sizes (filled from
	 * one nallocx per size class): both ends of each 8-byte range.
	 */
	for (size_t n = 1; n <= 16384; n += 8) {
		for (size_t m = n; m <= n + 7 && m <= 16384; m += 7) {
			void *p = tfa_allocator_allocate_raw(a, 0, m, NULL);
			ck_assert_ptr_nonnull(p);
			size_t good = tfa_allocator_good_size(a, m, 0);
			size_t slow = tfa_allocator_allocated_size_slow(a, p);
			ck_assert_msg(good == slow, "jemalloc: %zu bytes: good_size %zu, allocated_size_slow %zu", m,
				      good, slow);
			tfa_allocator_deallocate_raw(a, p);
		}
	}
}
END_TEST

/* What the shim's init does first: then glibc's usable size is known. */
START_TEST(test_registry_glibc_sizes_after_resolve)
{
	tfa_allocator_t *a = tfa_registry_find(TFA_DEVICE_CPU, "glibc", 0);

	ck_assert_ptr_eq(a, &tfa_glibc_allocator);
	tfa_glibc_allocator_resolve();
	for (size_t n = 1; n < 5000; n += (n < 64 ? 1 : n / 8)) {
		void *p = tfa_allocator_allocate_raw(a, 0, n, NULL);
		ck_assert_ptr_nonnull(p);
		size_t good = tfa_allocator_good_size(a, n, 0);
		size_t slow = tfa_allocator_allocated_size_slow(a, p);
		ck_assert_msg(slow >= good && good >= n, "glibc %zu bytes: good %zu slow %zu", n,
		              good, slow);
		ck_assert_uint_eq(tfa_glibc_usable_size(p), slow);
		tfa_allocator_deallocate_raw(a, p);
	}
}
END_TEST

static Suite *
registry_suite(void)
{
	Suite *s = suite_create("registry");
	TCase *tc;

	tc = tcase_create("rules");
	tcase_add_checked_fixture(tc, reset, NULL);
	tcase_add_test(tc, test_registry_empty);
	tcase_add_test(tc, test_registry_highest_priority_wins);
	tcase_add_test(tc, test_registry_tie_first_registered);
	tcase_add_test(tc, test_registry_duplicates);
	tcase_add_test(tc, test_registry_bad_entries);
	tcase_add_test(tc, test_registry_full);
	tcase_add_test(tc, test_registry_get_registered_allocator);
	tcase_add_test(tc, test_registry_unavailable_falls_through);
	tcase_add_test(tc, test_registry_create_once_per_ordinal);
	tcase_add_test(tc, test_registry_find);
	tcase_add_test(tc, test_registry_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("attrs");
	tcase_add_checked_fixture(tc, reset, NULL);
	tcase_add_test(tc, test_registry_attrs_pinned);
	tcase_add_test(tc, test_registry_attrs_host_only);
	tcase_add_test(tc, test_registry_attrs_priority);
	suite_add_tcase(s, tc);

	/* No reset: what the constructors registered. */
	tc = tcase_create("builtin");
	tcase_add_test(tc, test_registry_macro_registers);
	tcase_add_test(tc, test_registry_builtin_entries);
	tcase_add_test(tc, test_registry_cuda_entries);
	tcase_add_loop_test(tc, test_registry_builtin_allocate, 0, 2);
	tcase_add_loop_test(tc, test_registry_builtin_sizes_sane, 0, 2);
	tcase_add_test(tc, test_registry_glibc_sizes_after_resolve);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr;
	int failures;

	macro_registered_before_main =
	        tfa_registry_has_name(TFA_DEVICE_CUDA, "check-registry-macro");
	sr = srunner_create(registry_suite());
	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
