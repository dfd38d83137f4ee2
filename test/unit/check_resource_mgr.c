/* SPDX-License-Identifier: MIT */
/*
 * core/resource_mgr.h: TensorFlow's ResourceMgr (seed 004) as tfalloc keeps
 * it: the two-level map (container, then type hash and name), refcounts,
 * create / lookup / lookup_or_create / delete / cleanup / clear, the default
 * container, ContainerInfo's rules, names, limits and what is charged to a
 * resource, alone and under threads.
 */
#include "core/resource_mgr.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

static void
setup(void)
{
	tfa_res_reset();
}

/* The resource's coordinates and figures; fails the test when the tag is unknown. */
static tfa_res_info_t
info_of(uint32_t tag)
{
	tfa_res_info_t in;

	ck_assert_int_eq(tfa_res_info(tag, &in), TFA_RES_OK);
	return in;
}

static uint32_t
create(const char *container, const char *type, const char *name)
{
	uint32_t tag = 0;

	ck_assert_int_eq(tfa_res_create(container, type, name, NULL, &tag), TFA_RES_OK);
	ck_assert_uint_ne(tag, 0);
	return tag;
}

/* A name of n bytes ('a'...), in a buffer big enough for any test. */
static const char *
name_of_len(char *buf, size_t n, char fill)
{
	memset(buf, fill, n);
	buf[n] = '\0';
	return buf;
}

/* ---- keys: the two-level map ---------------------------------------------------------------- */

START_TEST(test_type_hash_is_fnv1a)
{
	/* FNV-1a 64 test vectors: stable across runs and processes. */
	ck_assert_uint_eq(tfa_res_type_hash(""), 0xcbf29ce484222325ULL);
	ck_assert_uint_eq(tfa_res_type_hash("a"), 0xaf63dc4c8601ec8cULL);
	ck_assert_uint_eq(tfa_res_type_hash("foobar"), 0x85944171f73967e8ULL);
	ck_assert_uint_ne(tfa_res_type_hash("scope"), tfa_res_type_hash("Scope"));
}
END_TEST

START_TEST(test_two_level_map)
{
	uint32_t a = create("c1", "T", "x");
	uint32_t b = create("c1", "U", "x"); /* same name, another type */
	uint32_t c = create("c2", "T", "x"); /* same type and name, another container */
	uint32_t d = create("c1", "T", "y");
	uint32_t t;

	ck_assert_uint_ne(a, b);
	ck_assert_uint_ne(a, c);
	ck_assert_uint_ne(b, c);
	ck_assert_uint_ne(d, a);
	ck_assert_uint_eq(tfa_res_tag_end(), d + 1);

	/* Each key finds its own resource. */
	ck_assert_int_eq(tfa_res_lookup("c1", "T", "x", &t), TFA_RES_OK);
	ck_assert_uint_eq(t, a);
	ck_assert_int_eq(tfa_res_lookup("c1", "U", "x", &t), TFA_RES_OK);
	ck_assert_uint_eq(t, b);
	ck_assert_int_eq(tfa_res_lookup("c2", "T", "x", &t), TFA_RES_OK);
	ck_assert_uint_eq(t, c);
	ck_assert_int_eq(tfa_res_lookup("c1", "T", "y", &t), TFA_RES_OK);
	ck_assert_uint_eq(t, d);

	/* What the key does not name is not there. */
	t = 77;
	ck_assert_int_eq(tfa_res_lookup("c2", "U", "x", &t), TFA_RES_ENOENT);
	ck_assert_uint_eq(t, 0);
	ck_assert_int_eq(tfa_res_lookup("c2", "T", "y", &t), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_lookup("c3", "T", "x", &t), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_lookup("", "T", "x", &t), TFA_RES_ENOENT);

	/* The info says where each one is and what it is. */
	tfa_res_info_t in = info_of(b);
	ck_assert_uint_eq(in.tag, b);
	ck_assert_str_eq(in.container, "c1");
	ck_assert_str_eq(in.type_name, "U");
	ck_assert_str_eq(in.name, "x");
	ck_assert_uint_eq(in.type_hash, tfa_res_type_hash("U"));
	ck_assert_uint_eq(in.state, TFA_RES_LIVE);
	in = info_of(c);
	ck_assert_str_eq(in.container, "c2");
	ck_assert_str_eq(tfa_res_container_name(c), "c2");
	ck_assert_str_eq(tfa_res_container_name(a), "c1");
	ck_assert_ptr_null(tfa_res_container_name(0));
	ck_assert_ptr_null(tfa_res_container_name(d + 1));
}
END_TEST

START_TEST(test_many_resources_and_tombstones)
{
	enum { N = 1000 }; /* many chunks of resources, many probes */
	static uint32_t tags[N];
	char name[32];
	uint32_t t;

	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		tags[i] = create(i % 3 == 0 ? "a" : "b", i % 2 ? "T" : "U", name);
		ck_assert_uint_eq(tags[i], (uint32_t)i + 1);
	}
	/* Delete every other one: the lookups of the others go past their tombstones. */
	for (int i = 0; i < N; i += 2) {
		snprintf(name, sizeof(name), "r%d", i);
		ck_assert_int_eq(tfa_res_delete(i % 3 == 0 ? "a" : "b", i % 2 ? "T" : "U", name),
				 TFA_RES_OK);
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		int err = tfa_res_lookup(i % 3 == 0 ? "a" : "b", i % 2 ? "T" : "U", name, &t);
		if (i % 2 == 0) {
			ck_assert_int_eq(err, TFA_RES_ENOENT);
		} else {
			ck_assert_int_eq(err, TFA_RES_OK);
			ck_assert_uint_eq(t, tags[i]);
		}
	}
	/* The deleted keys are free again, for new resources with new tags. */
	for (int i = 0; i < N; i += 2) {
		snprintf(name, sizeof(name), "r%d", i);
		t = create(i % 3 == 0 ? "a" : "b", i % 2 ? "T" : "U", name);
		ck_assert_uint_eq(t, (uint32_t)(N + 1 + i / 2));
	}
}
END_TEST

/* ---- create, lookup, lookup_or_create, refcounts ------------------------------------------- */

START_TEST(test_create)
{
	uint32_t t = 0, t2 = 99;

	ck_assert_int_eq(tfa_res_create("c", "T", "x", NULL, &t), TFA_RES_OK);
	tfa_res_info_t in = info_of(t);
	ck_assert_uint_eq(in.refcount, 1); /* the manager's */
	ck_assert_str_eq(in.debug, "T x"); /* the default debug string */
	ck_assert_int_eq(in.memory_used, 0);
	ck_assert_int_eq(in.bytes_limit, 0);
	ck_assert_uint_eq(in.devices, 0);

	/* The key is taken: EEXIST, no new tag, the resource unchanged. */
	ck_assert_int_eq(tfa_res_create("c", "T", "x", "again", &t2), TFA_RES_EEXIST);
	ck_assert_uint_eq(t2, 0);
	ck_assert_uint_eq(tfa_res_tag_end(), t + 1);
	in = info_of(t);
	ck_assert_uint_eq(in.refcount, 1);
	ck_assert_str_eq(in.debug, "T x");

	/* A debug string of its own; a NULL tag pointer is allowed. */
	ck_assert_int_eq(tfa_res_create("c", "T", "y", "the y table", NULL), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_lookup("c", "T", "y", &t2), TFA_RES_OK);
	ck_assert_str_eq(info_of(t2).debug, "the y table");

	/* An overlong debug string is cut, not refused. */
	char dbg[400];
	memset(dbg, 'd', sizeof(dbg) - 1);
	dbg[sizeof(dbg) - 1] = '\0';
	ck_assert_int_eq(tfa_res_create("c", "T", "z", dbg, &t2), TFA_RES_OK);
	ck_assert_uint_eq(strlen(info_of(t2).debug), TFA_RES_DEBUG_MAX);
}
END_TEST

START_TEST(test_lookup_gives_a_reference)
{
	uint32_t t = create("c", "T", "x"), l;

	ck_assert_int_eq(tfa_res_lookup("c", "T", "x", &l), TFA_RES_OK);
	ck_assert_uint_eq(l, t);
	ck_assert_uint_eq(info_of(t).refcount, 2);
	ck_assert_int_eq(tfa_res_lookup("c", "T", "x", &l), TFA_RES_OK);
	ck_assert_uint_eq(info_of(t).refcount, 3);
	/* A failed lookup takes nothing. */
	ck_assert_int_eq(tfa_res_lookup("c", "T", "nope", &l), TFA_RES_ENOENT);
	ck_assert_uint_eq(l, 0);
	ck_assert_uint_eq(info_of(t).refcount, 3);
}
END_TEST

START_TEST(test_lookup_or_create)
{
	uint32_t t = 0, t2 = 0;
	bool created = false;

	ck_assert_int_eq(tfa_res_lookup_or_create("c", "T", "x", "dbg", &t, &created), TFA_RES_OK);
	ck_assert(created);
	tfa_res_info_t in = info_of(t);
	ck_assert_uint_eq(in.refcount, 2); /* the manager's and the caller's */
	ck_assert_str_eq(in.debug, "dbg");

	ck_assert_int_eq(tfa_res_lookup_or_create("c", "T", "x", "other", &t2, &created), TFA_RES_OK);
	ck_assert(!created);
	ck_assert_uint_eq(t2, t);
	in = info_of(t);
	ck_assert_uint_eq(in.refcount, 3);
	ck_assert_str_eq(in.debug, "dbg"); /* the existing one, untouched */

	/* created may be NULL; another type is another resource. */
	ck_assert_int_eq(tfa_res_lookup_or_create("c", "U", "x", NULL, &t2, NULL), TFA_RES_OK);
	ck_assert_uint_ne(t2, t);
	ck_assert_uint_eq(info_of(t2).refcount, 2);

	/* create after lookup_or_create: the key is taken. */
	ck_assert_int_eq(tfa_res_create("c", "U", "x", NULL, NULL), TFA_RES_EEXIST);
	/* lookup_or_create's container is made on demand, lookup's is not. */
	ck_assert_int_eq(tfa_res_lookup("new", "T", "x", &t2), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_lookup_or_create("new", "T", "x", NULL, &t2, &created), TFA_RES_OK);
	ck_assert(created);
	ck_assert_str_eq(info_of(t2).container, "new");
}
END_TEST

START_TEST(test_refcounts)
{
	uint32_t t = create("c", "T", "x");

	ck_assert_int_eq(tfa_res_ref(t), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_ref(t), TFA_RES_OK);
	ck_assert_uint_eq(info_of(t).refcount, 3);
	ck_assert_int_eq(tfa_res_unref(t), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_unref(t), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_unref(t), TFA_RES_OK);
	ck_assert_uint_eq(info_of(t).refcount, 0);
	/* None left: EINVAL, and nothing changes. */
	ck_assert_int_eq(tfa_res_unref(t), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_ref(t), TFA_RES_EINVAL);
	ck_assert_uint_eq(info_of(t).refcount, 0);

	/* Tags that were never made. */
	ck_assert_int_eq(tfa_res_ref(0), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_unref(0), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_ref(t + 1), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_unref(TFA_RES_MAX), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_unref(UINT32_MAX), TFA_RES_ENOENT);
}
END_TEST

/* ---- delete ---------------------------------------------------------------------------------- */

/* Reserves and charges bytes to a resource on a device: what the shim does for one block. */
static void
alloc_block(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated)
{
	ck_assert(tfa_res_reserve(tag, bytes));
	tfa_res_charge(tag, device, bytes, allocated);
}

START_TEST(test_delete_by_key)
{
	uint32_t t = create("c", "T", "x"), l;

	alloc_block(t, 0, 100, 112);
	ck_assert_int_eq(tfa_res_lookup("c", "T", "x", &l), TFA_RES_OK); /* refcount 2 */
	ck_assert_int_eq(tfa_res_delete("c", "T", "x"), TFA_RES_OK);

	/* Out of the container, the manager's reference gone, the lookup's kept. */
	tfa_res_info_t in = info_of(t);
	ck_assert_uint_eq(in.state, TFA_RES_DELETED);
	ck_assert_uint_eq(in.refcount, 1);
	ck_assert_int_eq(tfa_res_lookup("c", "T", "x", &l), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete("c", "T", "x"), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete_tag(t), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_unref(t), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_unref(t), TFA_RES_EINVAL);

	/* It keeps its tag, coordinates and figures (the report shows them). */
	in = info_of(t);
	ck_assert_uint_eq(in.tag, t);
	ck_assert_str_eq(in.container, "c");
	ck_assert_str_eq(in.name, "x");
	ck_assert_int_eq(in.memory_used, 100);
	ck_assert_int_eq(in.peak, 100);
	ck_assert_str_eq(tfa_res_container_name(t), "c");
	tfa_res_stats_t st;
	ck_assert_int_eq(tfa_res_device_stats(t, 0, &st), TFA_RES_OK);
	ck_assert_uint_eq(st.num_allocs, 1);
	ck_assert_int_eq(st.bytes_in_use, 100);
	/* Its blocks are still freed to it. */
	tfa_res_uncharge(t, 0, 100, 112);
	ck_assert_int_eq(info_of(t).memory_used, 0);

	/* The key is free again: a new resource, a new tag, fresh figures. */
	uint32_t t2 = create("c", "T", "x");
	ck_assert_uint_gt(t2, t);
	in = info_of(t2);
	ck_assert_uint_eq(in.state, TFA_RES_LIVE);
	ck_assert_int_eq(in.peak, 0);
	ck_assert_int_eq(tfa_res_lookup("c", "T", "x", &l), TFA_RES_OK);
	ck_assert_uint_eq(l, t2);
	ck_assert_uint_eq(info_of(t).state, TFA_RES_DELETED);

	/* Unknown keys and containers. */
	ck_assert_int_eq(tfa_res_delete("c", "U", "x"), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete("c", "T", "y"), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete("nowhere", "T", "x"), TFA_RES_ENOENT);
}
END_TEST

START_TEST(test_delete_by_tag)
{
	uint32_t t = create("c", "T", "x");
	uint32_t other = create("c", "U", "x");

	ck_assert_int_eq(tfa_res_delete_tag(t), TFA_RES_OK);
	ck_assert_uint_eq(info_of(t).state, TFA_RES_DELETED);
	ck_assert_uint_eq(info_of(t).refcount, 0);
	ck_assert_int_eq(tfa_res_delete_tag(t), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete("c", "T", "x"), TFA_RES_ENOENT);
	/* The other type's resource of the same name is untouched. */
	ck_assert_uint_eq(info_of(other).state, TFA_RES_LIVE);

	ck_assert_int_eq(tfa_res_delete_tag(0), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete_tag(other + 1), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete_tag(UINT32_MAX), TFA_RES_ENOENT);

	uint32_t t2 = create("c", "T", "x");
	ck_assert_uint_eq(t2, other + 1);
	ck_assert_int_eq(tfa_res_delete_tag(t2), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_delete_tag(other), TFA_RES_OK);
}
END_TEST

/* ---- cleanup and clear ----------------------------------------------------------------------- */

static bool
has_tag(const uint32_t *tags, size_t n, uint32_t tag)
{
	for (size_t i = 0; i < n; i++)
		if (tags[i] == tag)
			return true;
	return false;
}

START_TEST(test_cleanup)
{
	uint32_t a = create("req", "T", "a");
	uint32_t b = create("req", "U", "b");
	uint32_t c = create("req", "T", "c");
	uint32_t other = create("keep", "T", "a");
	uint32_t tags[8], l;
	size_t n = 99;

	alloc_block(a, 0, 10, 16);
	alloc_block(other, 0, 20, 32);
	ck_assert_int_eq(tfa_res_lookup("req", "T", "c", &l), TFA_RES_OK); /* a reference held */

	ck_assert_int_eq(tfa_res_cleanup("req", tags, 8, &n), TFA_RES_OK);
	ck_assert_uint_eq(n, 3);
	ck_assert(has_tag(tags, n, a));
	ck_assert(has_tag(tags, n, b));
	ck_assert(has_tag(tags, n, c));
	ck_assert_uint_eq(info_of(a).state, TFA_RES_DELETED);
	ck_assert_uint_eq(info_of(b).state, TFA_RES_DELETED);
	ck_assert_uint_eq(info_of(c).state, TFA_RES_DELETED);
	ck_assert_uint_eq(info_of(a).refcount, 0);
	ck_assert_uint_eq(info_of(c).refcount, 1); /* the lookup's */
	ck_assert_int_eq(info_of(a).memory_used, 10); /* still charged: the caller reports it */

	/* Another container is untouched. */
	ck_assert_uint_eq(info_of(other).state, TFA_RES_LIVE);
	ck_assert_int_eq(tfa_res_lookup("keep", "T", "a", &l), TFA_RES_OK);
	ck_assert_uint_eq(l, other);

	/* The container is gone. */
	ck_assert_int_eq(tfa_res_lookup("req", "T", "a", &l), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_delete("req", "T", "a"), TFA_RES_ENOENT);
	n = 99;
	ck_assert_int_eq(tfa_res_cleanup("req", tags, 8, &n), TFA_RES_ENOENT);
	ck_assert_uint_eq(n, 0);

	/* Unknown containers, bad names. */
	ck_assert_int_eq(tfa_res_cleanup("never", tags, 8, &n), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_cleanup(NULL, tags, 8, &n), TFA_RES_EINVAL);
	char longname[200];
	ck_assert_int_eq(tfa_res_cleanup(name_of_len(longname, 128, 'k'), tags, 8, &n),
			 TFA_RES_ENAMETOOLONG);
}
END_TEST

START_TEST(test_cleanup_container_usable_again)
{
	uint32_t a = create("req", "T", "a"), tags[8], l;
	size_t n;

	alloc_block(a, 0, 10, 16); /* a leak of the first request */
	ck_assert_int_eq(tfa_res_cleanup("req", tags, 8, &n), TFA_RES_OK);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(tags[0], a);

	/* The same container and key again: a new resource, a new tag. */
	uint32_t a2 = create("req", "T", "a");
	uint32_t b2 = create("req", "T", "b");
	ck_assert_uint_gt(a2, a);
	ck_assert_int_eq(tfa_res_lookup("req", "T", "a", &l), TFA_RES_OK);
	ck_assert_uint_eq(l, a2);
	ck_assert_str_eq(info_of(a2).container, "req");

	/* The second cleanup is of the second request only: a was reported by the first. */
	ck_assert_int_eq(tfa_res_cleanup("req", tags, 8, &n), TFA_RES_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert(has_tag(tags, n, a2));
	ck_assert(has_tag(tags, n, b2));
	ck_assert(!has_tag(tags, n, a));
}
END_TEST

START_TEST(test_cleanup_includes_deleted)
{
	/* A resource deleted before the cleanup still holds memory charged in the container. */
	uint32_t a = create("req", "T", "a"), b = create("req", "T", "b"), tags[8];
	size_t n;

	alloc_block(a, 0, 10, 16);
	ck_assert_int_eq(tfa_res_delete_tag(a), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_cleanup("req", tags, 8, &n), TFA_RES_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert(has_tag(tags, n, a));
	ck_assert(has_tag(tags, n, b));
}
END_TEST

START_TEST(test_cleanup_tags_buffer)
{
	uint32_t tags[3] = { 0, 0, 0 }, first = 0;
	size_t n;
	char name[16];

	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		uint32_t t = create("req", "T", name);
		if (i == 0)
			first = t;
	}
	/* Two slots: two tags written, the count of all five. */
	ck_assert_int_eq(tfa_res_cleanup("req", tags, 2, &n), TFA_RES_OK);
	ck_assert_uint_eq(n, 5);
	ck_assert_uint_eq(tags[0], first);
	ck_assert_uint_eq(tags[1], first + 1);
	ck_assert_uint_eq(tags[2], 0);

	/* No buffer, no count. */
	create("req", "T", "x");
	ck_assert_int_eq(tfa_res_cleanup("req", NULL, 0, NULL), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_cleanup("req", NULL, 0, &n), TFA_RES_ENOENT);
}
END_TEST

START_TEST(test_clear)
{
	uint32_t a = create("c1", "T", "a");
	uint32_t b = create("c2", "T", "a");
	uint32_t d = create("", "T", "a");
	uint32_t l;
	size_t n;

	alloc_block(b, 1, 5, 8);
	tfa_res_clear();
	ck_assert_uint_eq(info_of(a).state, TFA_RES_DELETED);
	ck_assert_uint_eq(info_of(b).state, TFA_RES_DELETED);
	ck_assert_uint_eq(info_of(d).state, TFA_RES_DELETED);
	ck_assert_int_eq(info_of(b).memory_used, 5);
	ck_assert_int_eq(tfa_res_lookup("c1", "T", "a", &l), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_lookup("", "T", "a", &l), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_cleanup("c2", NULL, 0, &n), TFA_RES_ENOENT);

	/* Everything is usable again, with new tags. */
	uint32_t a2 = create("c1", "T", "a");
	ck_assert_uint_gt(a2, d);
	tfa_res_clear();
	tfa_res_clear(); /* twice: nothing left to do */
	ck_assert_uint_eq(info_of(a2).state, TFA_RES_DELETED);

	/* An empty manager. */
	tfa_res_reset();
	tfa_res_clear();
	ck_assert_uint_eq(tfa_res_tag_end(), 1);
}
END_TEST

START_TEST(test_default_container)
{
	uint32_t t = create("", "T", "x"), l;

	ck_assert_str_eq(info_of(t).container, TFA_RES_DEFAULT_CONTAINER);
	ck_assert_str_eq(tfa_res_container_name(t), "default");
	/* "" and "default" are the same container. */
	ck_assert_int_eq(tfa_res_lookup("default", "T", "x", &l), TFA_RES_OK);
	ck_assert_uint_eq(l, t);
	ck_assert_int_eq(tfa_res_create("default", "T", "x", NULL, NULL), TFA_RES_EEXIST);
	uint32_t u = create("default", "T", "y");
	ck_assert_int_eq(tfa_res_lookup("", "T", "y", &l), TFA_RES_OK);
	ck_assert_uint_eq(l, u);
	ck_assert_int_eq(tfa_res_delete("", "T", "y"), TFA_RES_OK);

	uint32_t tags[4];
	size_t n;
	ck_assert_int_eq(tfa_res_cleanup("", tags, 4, &n), TFA_RES_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(tfa_res_cleanup("default", tags, 4, &n), TFA_RES_ENOENT);
}
END_TEST

/* ---- ContainerInfo --------------------------------------------------------------------------- */

START_TEST(test_container_info)
{
	tfa_res_container_info_t ci;

	/* The container attribute, or the default container. */
	ck_assert_int_eq(tfa_res_container_info("mine", "shared", "node", false, &ci), TFA_RES_OK);
	ck_assert_str_eq(ci.container, "mine");
	ck_assert_str_eq(ci.name, "shared");
	ck_assert(!ci.resource_is_private_to_kernel);
	ck_assert_int_eq(tfa_res_container_info("", "shared", "node", true, &ci), TFA_RES_OK);
	ck_assert_str_eq(ci.container, "default");
	ck_assert_str_eq(ci.name, "shared"); /* shared_name wins over the node name */
	ck_assert(!ci.resource_is_private_to_kernel);

	/* No shared name: the node's name when asked, */
	ck_assert_int_eq(tfa_res_container_info("", "", "node", true, &ci), TFA_RES_OK);
	ck_assert_str_eq(ci.name, "node");
	ck_assert(!ci.resource_is_private_to_kernel);

	/* else a name private to the kernel, new each time. */
	ck_assert_int_eq(tfa_res_container_info("c", "", "node", false, &ci), TFA_RES_OK);
	ck_assert_str_eq(ci.container, "c");
	ck_assert(ci.resource_is_private_to_kernel);
	ck_assert_str_eq(ci.name, "_0_node");
	ck_assert_int_eq(tfa_res_container_info("c", "", "node", false, &ci), TFA_RES_OK);
	ck_assert_str_eq(ci.name, "_1_node");
	ck_assert(ci.resource_is_private_to_kernel);

	/* A shared name may not start with '_' (the private names do). */
	ck_assert_int_eq(tfa_res_container_info("c", "_x", "node", false, &ci), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_container_info("c", "_", "node", true, &ci), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_container_info("c", "x_", "node", false, &ci), TFA_RES_OK);

	/* Bad names. */
	char longname[200];
	ck_assert_int_eq(tfa_res_container_info(NULL, "", "node", false, &ci), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_container_info("", NULL, "node", false, &ci), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_container_info("", "", NULL, false, &ci), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_container_info("", "", "", true, &ci), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_container_info(name_of_len(longname, 128, 'c'), "", "n", true, &ci),
			 TFA_RES_ENAMETOOLONG);
	ck_assert_int_eq(tfa_res_container_info("", name_of_len(longname, 128, 's'), "n", true, &ci),
			 TFA_RES_ENAMETOOLONG);
	/* A node name that fits, but not with the private prefix. */
	ck_assert_int_eq(tfa_res_container_info("", "", name_of_len(longname, 127, 'n'), true, &ci),
			 TFA_RES_OK);
	ck_assert_uint_eq(strlen(ci.name), 127);
	ck_assert_int_eq(tfa_res_container_info("", "", longname, false, &ci), TFA_RES_ENAMETOOLONG);

	/* What ContainerInfo chose makes a resource like any other. */
	ck_assert_int_eq(tfa_res_container_info("", "", "node", false, &ci), TFA_RES_OK);
	uint32_t t = create(ci.container, "T", ci.name);
	ck_assert_str_eq(info_of(t).name, ci.name);
}
END_TEST

/* ---- names ----------------------------------------------------------------------------------- */

START_TEST(test_bad_names)
{
	char n127[200], n128[200];
	uint32_t t = 5;
	bool created = true;

	name_of_len(n127, 127, 'a');
	name_of_len(n128, 128, 'b');
	ck_assert_int_eq(tfa_res_check_name(NULL, true), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_check_name("", false), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_check_name("", true), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_check_name(n127, false), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_check_name(n128, true), TFA_RES_ENAMETOOLONG);

	/* Each of the three names of a key, through each call. */
	const char *good[3] = { "c", "T", "x" };
	for (int pos = 0; pos < 3; pos++) {
		const char *k[3];
		for (int bad = 0; bad < 3; bad++) {
			static const int want[3] = { TFA_RES_EINVAL, TFA_RES_EINVAL, TFA_RES_ENAMETOOLONG };
			const char *badname = bad == 0 ? NULL : bad == 1 ? "" : n128;
			int expect = want[bad];
			if (bad == 1 && pos == 0)
				continue; /* "" is the default container */
			memcpy(k, good, sizeof(k));
			k[pos] = badname;
			ck_assert_int_eq(tfa_res_create(k[0], k[1], k[2], NULL, &t), expect);
			ck_assert_uint_eq(t, 0);
			ck_assert_int_eq(tfa_res_lookup(k[0], k[1], k[2], &t), expect);
			ck_assert_int_eq(tfa_res_lookup_or_create(k[0], k[1], k[2], NULL, &t, &created),
					 expect);
			ck_assert_int_eq(tfa_res_delete(k[0], k[1], k[2]), expect);
		}
		/* 127 bytes are a name. */
		memcpy(k, good, sizeof(k));
		k[pos] = n127;
		ck_assert_int_eq(tfa_res_create(k[0], k[1], k[2], NULL, &t), TFA_RES_OK);
		tfa_res_info_t in = info_of(t);
		ck_assert_str_eq(pos == 0 ? in.container : pos == 1 ? in.type_name : in.name, n127);
		uint32_t l;
		ck_assert_int_eq(tfa_res_lookup(k[0], k[1], k[2], &l), TFA_RES_OK);
		ck_assert_uint_eq(l, t);
		ck_assert_int_eq(tfa_res_delete(k[0], k[1], k[2]), TFA_RES_OK);
	}
	/* Nothing was made by the bad calls: three resources, three tags. */
	ck_assert_uint_eq(tfa_res_tag_end(), 4);
	/* Overlong names are refused by their length, not read past it. */
	ck_assert_int_eq(tfa_res_lookup("c", "T", n128, &t), TFA_RES_ENAMETOOLONG);
}
END_TEST

START_TEST(test_containers_limit)
{
	char name[32];

	for (unsigned i = 0; i < TFA_RES_CONTAINERS_MAX; i++) {
		snprintf(name, sizeof(name), "c%u", i);
		ck_assert_int_eq(tfa_res_create(name, "T", "x", NULL, NULL), TFA_RES_OK);
	}
	ck_assert_int_eq(tfa_res_create("one-more", "T", "x", NULL, NULL), TFA_RES_ENOMEM);
	/* Existing containers still take resources, and a cleaned up one comes back. */
	ck_assert_int_eq(tfa_res_create("c7", "T", "y", NULL, NULL), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_cleanup("c7", NULL, 0, NULL), TFA_RES_OK);
	ck_assert_int_eq(tfa_res_create("c7", "T", "y", NULL, NULL), TFA_RES_OK);
}
END_TEST

/* ---- limits ---------------------------------------------------------------------------------- */

START_TEST(test_limits)
{
	uint32_t t = create("c", "T", "x");

	ck_assert_int_eq(tfa_res_set_limit(t, 100), TFA_RES_OK);
	ck_assert_int_eq(info_of(t).bytes_limit, 100);
	ck_assert(tfa_res_reserve(t, 60));
	/* Past the limit: refused, nothing changed. */
	ck_assert(!tfa_res_reserve(t, 41));
	ck_assert_int_eq(info_of(t).memory_used, 60);
	ck_assert(!tfa_res_reserve(t, UINT32_MAX));
	ck_assert_int_eq(info_of(t).memory_used, 60);
	/* Sizes past INT64_MAX are no negative charges. */
	ck_assert(!tfa_res_reserve(t, UINT64_MAX));
	ck_assert(!tfa_res_reserve(t, (uint64_t)1 << 63));
	ck_assert_int_eq(info_of(t).memory_used, 60);
	/* Up to the limit exactly. */
	ck_assert(tfa_res_reserve(t, 40));
	ck_assert_int_eq(info_of(t).memory_used, 100);
	ck_assert(!tfa_res_reserve(t, 1));
	/* A reservation given back makes room. */
	tfa_res_unreserve(t, 40);
	ck_assert_int_eq(info_of(t).memory_used, 60);
	ck_assert(tfa_res_reserve(t, 30));
	tfa_res_charge(t, 0, 30, 32);
	ck_assert(!tfa_res_reserve(t, 11));
	/* A freed block makes room. */
	tfa_res_uncharge(t, 0, 30, 32);
	ck_assert(tfa_res_reserve(t, 40));
	tfa_res_unreserve(t, 40);

	/* A limit below what is in use: every new reservation is refused. */
	ck_assert_int_eq(tfa_res_set_limit(t, 10), TFA_RES_OK);
	ck_assert(!tfa_res_reserve(t, 1));
	/* 0 removes the limit. */
	ck_assert_int_eq(tfa_res_set_limit(t, 0), TFA_RES_OK);
	ck_assert_int_eq(info_of(t).bytes_limit, 0);
	ck_assert(tfa_res_reserve(t, 1 << 30));
	tfa_res_unreserve(t, 1 << 30);
	ck_assert_int_eq(info_of(t).memory_used, 60);

	/* Bad limits and unknown tags. */
	ck_assert_int_eq(tfa_res_set_limit(t, -1), TFA_RES_EINVAL);
	ck_assert_int_eq(tfa_res_set_limit(0, 10), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_set_limit(t + 1, 10), TFA_RES_ENOENT);
	/* A tag that is not a resource is charged nothing and never refused. */
	ck_assert(tfa_res_reserve(0, 1000));
	ck_assert(tfa_res_reserve(t + 1, 1000));
	tfa_res_unreserve(0, 1000);
	tfa_res_charge(0, 0, 1000, 1024);
	tfa_res_uncharge(t + 1, 0, 1000, 1024);

	/* Limits are per resource: another one is not limited by this one's. */
	uint32_t u = create("c", "T", "y");
	ck_assert_int_eq(tfa_res_set_limit(t, 61), TFA_RES_OK);
	ck_assert(tfa_res_reserve(u, 1000));
	ck_assert(tfa_res_reserve(t, 1));
	ck_assert(!tfa_res_reserve(t, 1));
}
END_TEST

/* ---- charging -------------------------------------------------------------------------------- */

START_TEST(test_charging)
{
	uint32_t t = create("c", "T", "x");
	tfa_res_stats_t st;

	alloc_block(t, 0, 100, 112);
	alloc_block(t, 0, 300, 320);
	alloc_block(t, 3, 1000, 1024);
	tfa_res_info_t in = info_of(t);
	ck_assert_int_eq(in.memory_used, 1400);
	ck_assert_int_eq(in.peak, 1400);
	ck_assert_uint_eq(in.devices, (1u << 0) | (1u << 3));

	ck_assert_int_eq(tfa_res_device_stats(t, 0, &st), TFA_RES_OK);
	ck_assert_uint_eq(st.num_allocs, 2);
	ck_assert_uint_eq(st.num_frees, 0);
	ck_assert_uint_eq(st.total_bytes, 400);
	ck_assert_uint_eq(st.total_allocated_bytes, 432);
	ck_assert_uint_eq(st.largest_alloc_size, 300);
	ck_assert_int_eq(st.bytes_in_use, 400);
	ck_assert_int_eq(st.allocated_bytes_in_use, 432);
	ck_assert_int_eq(st.peak_bytes_in_use, 400);
	ck_assert_int_eq(st.peak_allocated_bytes_in_use, 432);

	ck_assert_int_eq(tfa_res_device_stats(t, 3, &st), TFA_RES_OK);
	ck_assert_uint_eq(st.num_allocs, 1);
	ck_assert_uint_eq(st.largest_alloc_size, 1000);
	ck_assert_int_eq(st.bytes_in_use, 1000);

	/* Frees: in use falls, the peaks stay. */
	tfa_res_uncharge(t, 0, 300, 320);
	tfa_res_uncharge(t, 3, 1000, 1024);
	in = info_of(t);
	ck_assert_int_eq(in.memory_used, 100);
	ck_assert_int_eq(in.peak, 1400);
	ck_assert_uint_eq(in.devices, (1u << 0) | (1u << 3));
	ck_assert_int_eq(tfa_res_device_stats(t, 0, &st), TFA_RES_OK);
	ck_assert_uint_eq(st.num_frees, 1);
	ck_assert_int_eq(st.bytes_in_use, 100);
	ck_assert_int_eq(st.allocated_bytes_in_use, 112);
	ck_assert_int_eq(st.peak_bytes_in_use, 400);
	ck_assert_uint_eq(st.total_bytes, 400);

	/* A new peak of the resource only when in use passes the old one. */
	alloc_block(t, 0, 200, 208);
	ck_assert_int_eq(info_of(t).peak, 1400);
	alloc_block(t, 1, 1200, 1216);
	ck_assert_int_eq(info_of(t).peak, 1500);
	ck_assert_int_eq(tfa_res_device_stats(t, 0, &st), TFA_RES_OK);
	ck_assert_int_eq(st.peak_bytes_in_use, 400);
	ck_assert_uint_eq(st.largest_alloc_size, 300);
	ck_assert_uint_eq(info_of(t).devices, 0xbu);

	/* A device where nothing was charged, one past the codes, an unknown tag. */
	ck_assert_int_eq(tfa_res_device_stats(t, 2, &st), TFA_RES_OK);
	ck_assert_uint_eq(st.num_allocs, 0);
	ck_assert_int_eq(st.peak_bytes_in_use, 0);
	ck_assert_int_eq(tfa_res_device_stats(t, TFA_RES_DEVICES, &st), TFA_RES_OK);
	ck_assert_uint_eq(st.num_allocs, 0);
	ck_assert_int_eq(tfa_res_device_stats(0, 0, &st), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_device_stats(t + 1, 0, &st), TFA_RES_ENOENT);
	tfa_res_info_t junk;
	ck_assert_int_eq(tfa_res_info(0, &junk), TFA_RES_ENOENT);
	ck_assert_int_eq(tfa_res_info(t + 1, &junk), TFA_RES_ENOENT);

	/* The last device code. */
	alloc_block(t, TFA_RES_DEVICES - 1, 7, 8);
	ck_assert_uint_eq(info_of(t).devices, 0x8000000bu);
	ck_assert_int_eq(tfa_res_device_stats(t, TFA_RES_DEVICES - 1, &st), TFA_RES_OK);
	ck_assert_int_eq(st.bytes_in_use, 7);
}
END_TEST

/* ---- threads --------------------------------------------------------------------------------- */

#define MT_THREADS 4
#define MT_ITERS   20000
#define MT_NAMES   8

static void *
mt_worker(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	char name[16];
	/* Blocks held, freed a while later: a ring per thread. */
	uint32_t held_tag[64] = { 0 };
	uint64_t held_bytes[64] = { 0 };

	for (uint32_t i = 0; i < MT_ITERS; i++) {
		uint32_t k = (uint32_t)(i + id) % MT_NAMES;
		uint32_t tag;
		bool created;
		snprintf(name, sizeof(name), "r%u", k);
		if (tfa_res_lookup_or_create("mt", "T", name, NULL, &tag, &created) != TFA_RES_OK)
			return (void *)1;
		uint64_t bytes = 1 + (i % 97) + k * 1000;
		uint32_t slot = i % 64;
		if (held_tag[slot] != 0)
			tfa_res_uncharge(held_tag[slot], (unsigned)(held_tag[slot] % 2), held_bytes[slot],
					 held_bytes[slot] + 8);
		if (!tfa_res_reserve(tag, bytes))
			return (void *)2;
		tfa_res_charge(tag, tag % 2, bytes, bytes + 8);
		held_tag[slot] = tag;
		held_bytes[slot] = bytes;
		if (tfa_res_unref(tag) != TFA_RES_OK)
			return (void *)3;
	}
	/* The last 64 blocks stay live: the totals below know which. */
	return NULL;
}

START_TEST(test_threads_exact_totals)
{
	pthread_t th[MT_THREADS];
	/* The model, computed alone: per name, allocations, bytes and what stays live. */
	uint64_t allocs[MT_NAMES] = { 0 }, total[MT_NAMES] = { 0 }, live[MT_NAMES] = { 0 };
	uint64_t frees[MT_NAMES] = { 0 };

	for (uintptr_t id = 0; id < MT_THREADS; id++) {
		for (uint32_t i = 0; i < MT_ITERS; i++) {
			uint32_t k = (uint32_t)(i + id) % MT_NAMES;
			uint64_t bytes = 1 + (i % 97) + k * 1000;
			allocs[k]++;
			total[k] += bytes;
			if (i + 64 < MT_ITERS)
				frees[k]++;
			else
				live[k] += bytes;
		}
	}

	for (uintptr_t t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, mt_worker, (void *)t), 0);
	for (int t = 0; t < MT_THREADS; t++) {
		void *ret;
		ck_assert_int_eq(pthread_join(th[t], &ret), 0);
		ck_assert_ptr_null(ret);
	}

	/* Exactly MT_NAMES resources, made once each, every reference given back. */
	ck_assert_uint_eq(tfa_res_tag_end(), MT_NAMES + 1);
	for (uint32_t k = 0; k < MT_NAMES; k++) {
		char name[16];
		uint32_t tag;
		tfa_res_stats_t st;
		snprintf(name, sizeof(name), "r%u", k);
		ck_assert_int_eq(tfa_res_lookup("mt", "T", name, &tag), TFA_RES_OK);
		tfa_res_info_t in = info_of(tag);
		ck_assert_uint_eq(in.refcount, 2); /* the manager's and this lookup's */
		ck_assert_int_eq(in.memory_used, (int64_t)live[k]);
		ck_assert_uint_eq(in.devices, 1u << (tag % 2));
		ck_assert_int_eq(tfa_res_device_stats(tag, tag % 2, &st), TFA_RES_OK);
		ck_assert_uint_eq(st.num_allocs, allocs[k]);
		ck_assert_uint_eq(st.num_frees, frees[k]);
		ck_assert_uint_eq(st.total_bytes, total[k]);
		ck_assert_uint_eq(st.total_allocated_bytes, total[k] + 8 * allocs[k]);
		ck_assert_int_eq(st.bytes_in_use, (int64_t)live[k]);
		ck_assert_int_eq(st.allocated_bytes_in_use, (int64_t)(live[k] + 8 * (allocs[k] - frees[k])));
		ck_assert_uint_eq(st.largest_alloc_size, 97 + k * 1000);
		ck_assert_int_ge(st.peak_bytes_in_use, st.bytes_in_use);
		ck_assert_int_ge(in.peak, in.memory_used);
	}
}
END_TEST

/* Threads that make and delete resources of their own, all at once: tags are never shared. */
static void *
mt_maker(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	char name[32];

	for (uint32_t i = 0; i < 500; i++) {
		uint32_t tag;
		snprintf(name, sizeof(name), "t%lu-%u", (unsigned long)id, i);
		if (tfa_res_create("shared", "T", name, NULL, &tag) != TFA_RES_OK)
			return (void *)1;
		tfa_res_info_t in;
		if (tfa_res_info(tag, &in) != TFA_RES_OK || strcmp(in.name, name) != 0)
			return (void *)2;
		if (i % 2 == 0 && tfa_res_delete_tag(tag) != TFA_RES_OK)
			return (void *)3;
	}
	return NULL;
}

START_TEST(test_threads_create_delete)
{
	pthread_t th[MT_THREADS];

	for (uintptr_t t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, mt_maker, (void *)t), 0);
	for (int t = 0; t < MT_THREADS; t++) {
		void *ret;
		ck_assert_int_eq(pthread_join(th[t], &ret), 0);
		ck_assert_ptr_null(ret);
	}
	ck_assert_uint_eq(tfa_res_tag_end(), MT_THREADS * 500 + 1);
	size_t n;
	ck_assert_int_eq(tfa_res_cleanup("shared", NULL, 0, &n), TFA_RES_OK);
	ck_assert_uint_eq(n, MT_THREADS * 500);
}
END_TEST

/*
 * A limit under threads: reservations that cannot fit (1000 bytes, limit 100)
 * are refused, and while they are, a small one that fits (10 bytes, nothing
 * else held) is never refused because of them.
 */
static uint32_t lim_tag;
static int lim_stop, lim_started;

static void *
lim_big(void *arg)
{
	(void)arg;
	__atomic_add_fetch(&lim_started, 1, __ATOMIC_RELAXED);
	while (!__atomic_load_n(&lim_stop, __ATOMIC_RELAXED))
		if (tfa_res_reserve(lim_tag, 1000))
			return (void *)1;
	return NULL;
}

START_TEST(test_threads_limit_exact)
{
	pthread_t th[MT_THREADS - 1];
	uint64_t refused = 0;

	lim_stop = lim_started = 0; /* without CK_FORK too */
	lim_tag = create("c", "T", "limited");
	ck_assert_int_eq(tfa_res_set_limit(lim_tag, 100), TFA_RES_OK);
	for (uintptr_t t = 0; t < MT_THREADS - 1; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, lim_big, NULL), 0);
	while (__atomic_load_n(&lim_started, __ATOMIC_RELAXED) < MT_THREADS - 1)
		sched_yield();
	for (int i = 0; i < 300000; i++) {
		if (tfa_res_reserve(lim_tag, 10))
			tfa_res_unreserve(lim_tag, 10);
		else
			refused++;
	}
	__atomic_store_n(&lim_stop, 1, __ATOMIC_RELAXED);
	for (int t = 0; t < MT_THREADS - 1; t++) {
		void *ret;
		ck_assert_int_eq(pthread_join(th[t], &ret), 0);
		ck_assert_ptr_null(ret);
	}
	ck_assert_uint_eq(refused, 0);
	ck_assert_int_eq(info_of(lim_tag).memory_used, 0);
}
END_TEST

static Suite *
resource_mgr_suite(void)
{
	Suite *s = suite_create("resource_mgr");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_type_hash_is_fnv1a);
	tcase_add_test(tc, test_two_level_map);
	tcase_add_test(tc, test_many_resources_and_tombstones);
	tcase_add_test(tc, test_create);
	tcase_add_test(tc, test_lookup_gives_a_reference);
	tcase_add_test(tc, test_lookup_or_create);
	tcase_add_test(tc, test_refcounts);
	tcase_add_test(tc, test_delete_by_key);
	tcase_add_test(tc, test_delete_by_tag);
	tcase_add_test(tc, test_cleanup);
	tcase_add_test(tc, test_cleanup_container_usable_again);
	tcase_add_test(tc, test_cleanup_includes_deleted);
	tcase_add_test(tc, test_cleanup_tags_buffer);
	tcase_add_test(tc, test_clear);
	tcase_add_test(tc, test_default_container);
	tcase_add_test(tc, test_container_info);
	tcase_add_test(tc, test_bad_names);
	tcase_add_test(tc, test_containers_limit);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_charging);
	suite_add_tcase(s, tc);

	TCase *mt = tcase_create("threads");
	tcase_add_checked_fixture(mt, setup, NULL);
	tcase_add_test(mt, test_threads_exact_totals);
	tcase_add_test(mt, test_threads_create_delete);
	tcase_add_test(mt, test_threads_limit_exact);
	suite_add_tcase(s, mt);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(resource_mgr_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
