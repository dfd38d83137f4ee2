/* SPDX-License-Identifier: MIT */
/*
 * The control API (preload/tfalloc.h) from a program that links nothing of
 * tfalloc.  Checks its own expectations and prints "FAIL ..." lines (exit 1)
 * when one does not hold; the figures the report must show are printed as
 * "KEY value" lines for test_control.py.
 *
 *   tp_control api       every call, good and bad, under the shim
 *   tp_control inactive  every call without the shim: TFALLOC_ENOTACTIVE, zeroed outputs
 *   tp_control threads   two named threads allocate known amounts (--tag-by thread)
 *   tp_control scopes    scopes are per thread: a thread's scope charges nothing of another's
 *   tp_control dumploop  writes snapshots without end (a SIGTERM meanwhile must still end it)
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tfalloc.h"

static int failures;

#define CHECK_EQ(got, want)                                                                  \
	do {                                                                                 \
		long long g_ = (long long)(got), w_ = (long long)(want);                     \
		if (g_ != w_) {                                                              \
			printf("FAIL line %d: %s = %lld, expected %lld\n", __LINE__, #got, g_, w_); \
			failures++;                                                          \
		}                                                                            \
	} while (0)

static void *volatile sink;

static int
api(void)
{
	tfalloc_resource_handle_t h, h2;
	tfalloc_resource_info_t info;
	tfalloc_stats_t st;
	int created = -1;
	char longname[200];

	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	CHECK_EQ(tfalloc_active(), 1);

	/* Bad calls: an error code each, never a crash. */
	CHECK_EQ(tfalloc_scope_exit(), TFALLOC_ESCOPE);
	CHECK_EQ(tfalloc_scope_enter(NULL, "x"), TFALLOC_EINVAL);
	CHECK_EQ(tfalloc_scope_enter("c", NULL), TFALLOC_EINVAL);
	CHECK_EQ(tfalloc_scope_enter("c", ""), TFALLOC_EINVAL);
	CHECK_EQ(tfalloc_scope_enter("c", longname), TFALLOC_ENAMETOOLONG);
	CHECK_EQ(tfalloc_scope_enter_handle(NULL), TFALLOC_EINVAL);
	CHECK_EQ(tfalloc_resource_create("c", NULL, "n", NULL, &h), TFALLOC_EINVAL);
	CHECK_EQ(tfalloc_resource_lookup("nope", "t", "n", &h), TFALLOC_ENOENT);
	CHECK_EQ(tfalloc_resource_delete("nope", "t", "n"), TFALLOC_ENOENT);
	CHECK_EQ(tfalloc_container_cleanup("never-made", NULL), TFALLOC_ENOENT);
	CHECK_EQ(tfalloc_container_cleanup(NULL, NULL), TFALLOC_EINVAL);
	CHECK_EQ(tfalloc_device_stats("tpu", &st), TFALLOC_ENOENT);
	CHECK_EQ(tfalloc_device_stats(NULL, &st), TFALLOC_EINVAL);
	CHECK_EQ(tfalloc_pointer_info(NULL, NULL), TFALLOC_EINVAL);
	int on_stack;
	tfalloc_pointer_info_t pi;
	CHECK_EQ(tfalloc_pointer_info(&on_stack, &pi), TFALLOC_ENOENT);
	memset(&h2, 0, sizeof(h2));
	h2.id = 12345;
	CHECK_EQ(tfalloc_resource_info(&h2, &info), TFALLOC_ENOENT);

	/* create / lookup / lookup_or_create / refcounts. */
	CHECK_EQ(tfalloc_resource_create("model", "weights", "layer1", "the first layer", &h), 0);
	CHECK_EQ(tfalloc_resource_create("model", "weights", "layer1", NULL, &h2), TFALLOC_EEXIST);
	CHECK_EQ(tfalloc_resource_info(&h, &info), 0);
	CHECK_EQ(info.refcount, 1);
	CHECK_EQ(strcmp(info.debug_string, "the first layer"), 0);
	CHECK_EQ(strcmp(h.maybe_type_name, "weights"), 0);
	CHECK_EQ(tfalloc_resource_lookup("model", "weights", "layer1", &h2), 0);
	CHECK_EQ(h2.id, h.id);
	CHECK_EQ(tfalloc_resource_info(&h, &info), 0);
	CHECK_EQ(info.refcount, 2);
	CHECK_EQ(tfalloc_resource_unref(&h2), 0);
	/* Another type, same name: another resource. */
	CHECK_EQ(tfalloc_resource_lookup_or_create("model", "grads", "layer1", NULL, &h2, &created), 0);
	CHECK_EQ(created, 1);
	CHECK_EQ(h2.id != h.id, 1);
	CHECK_EQ(tfalloc_resource_lookup_or_create("model", "grads", "layer1", NULL, &h2, &created), 0);
	CHECK_EQ(created, 0);

	/* Charging: nested scopes, a handle's scope, the stats per device. */
	CHECK_EQ(tfalloc_scope_enter_handle(&h), 0);
	void *w1 = malloc(3000);
	void *w2 = calloc(10, 100);
	CHECK_EQ(tfalloc_scope_enter("model", "tmp"), 0);
	void *t1 = malloc(700);
	CHECK_EQ(tfalloc_scope_exit(), 0);
	w2 = realloc(w2, 2000); /* back in layer1: the realloc charges layer1 */
	CHECK_EQ(tfalloc_scope_exit(), 0);
	CHECK_EQ(tfalloc_scope_exit(), TFALLOC_ESCOPE);
	void *untagged = malloc(64);
	CHECK_EQ(tfalloc_resource_stats(&h, "cpu", &st), 0);
	CHECK_EQ(st.bytes_in_use, 5000);
	CHECK_EQ(st.num_allocs, 3);
	CHECK_EQ(st.num_frees, 1);
	CHECK_EQ(st.peak_bytes_in_use, 5000);
	CHECK_EQ(st.largest_alloc_size, 3000);
	CHECK_EQ(tfalloc_resource_info(&h, &info), 0);
	CHECK_EQ(info.memory_used, 5000);
	CHECK_EQ(tfalloc_pointer_info(w1, &pi), 0);
	CHECK_EQ(pi.requested_size, 3000);
	CHECK_EQ(pi.allocated_size >= 3000, 1);
	CHECK_EQ(pi.resource_id, h.id);
	CHECK_EQ(pi.allocation_id > 0, 1);
	CHECK_EQ(tfalloc_pointer_info(untagged, &pi), 0);
	CHECK_EQ(pi.resource_id, 0);
	free(untagged);
	free(t1);

	/* A limit: past it malloc fails with ENOMEM; a realloc that shrinks always passes. */
	CHECK_EQ(tfalloc_resource_set_limit(&h, 6000), 0);
	CHECK_EQ(tfalloc_scope_enter_handle(&h), 0);
	errno = 0;
	void *refused = malloc(1500);
	CHECK_EQ(refused == NULL, 1);
	CHECK_EQ(errno, ENOMEM);
	void *fits = malloc(900);
	CHECK_EQ(fits != NULL, 1);
	void *grown = realloc(w1, 4000);
	CHECK_EQ(grown == NULL, 1); /* w1 intact */
	w1 = realloc(w1, 1000);
	CHECK_EQ(w1 != NULL, 1);
	CHECK_EQ(tfalloc_scope_exit(), 0);
	CHECK_EQ(tfalloc_resource_info(&h, &info), 0);
	CHECK_EQ(info.memory_used, 3900);
	CHECK_EQ(info.bytes_limit, 6000);
	free(fits);

	/* Delete by handle: its blocks stay charged to it. */
	CHECK_EQ(tfalloc_resource_unref(&h2), 0);
	CHECK_EQ(tfalloc_resource_delete_handle(&h2), 0);
	CHECK_EQ(tfalloc_resource_delete_handle(&h2), TFALLOC_ENOENT);
	CHECK_EQ(tfalloc_resource_lookup("model", "grads", "layer1", &h2), TFALLOC_ENOENT);

	/* A scoped leak check: the container "req" leaves one block. */
	tfalloc_cleanup_result_t res;
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(tfalloc_scope_enter("req", "handler"), 0);
		void *p = malloc(128);
		void *q = malloc(256);
		free(p);
		if (i != 2)
			free(q);
		else
			sink = q;
		CHECK_EQ(tfalloc_scope_exit(), 0);
	}
	CHECK_EQ(tfalloc_container_cleanup("req", &res), 0);
	CHECK_EQ(res.blocks, 1);
	CHECK_EQ(res.bytes, 256);
	CHECK_EQ(res.resources, 1);
	CHECK_EQ(tfalloc_container_cleanup("req", &res), TFALLOC_ENOENT);
	free(sink);
	/* A clean container: nothing reported. */
	CHECK_EQ(tfalloc_scope_enter("", "clean"), 0);
	free(malloc(10));
	CHECK_EQ(tfalloc_scope_exit(), 0);
	CHECK_EQ(tfalloc_container_cleanup("", &res), 0);
	CHECK_EQ(res.blocks, 0);

	/* ContainerInfo. */
	tfalloc_container_info_t ci;
	CHECK_EQ(tfalloc_container_info_init("", "shared", "node", 0, &ci), 0);
	CHECK_EQ(strcmp(ci.container, "default"), 0);
	CHECK_EQ(strcmp(ci.name, "shared"), 0);
	CHECK_EQ(tfalloc_container_info_init("c", "", "node", 1, &ci), 0);
	CHECK_EQ(strcmp(ci.name, "node"), 0);
	CHECK_EQ(tfalloc_container_info_init("c", "", "node", 0, &ci), 0);
	CHECK_EQ(ci.resource_is_private_to_kernel, 1);
	CHECK_EQ(ci.name[0], '_');
	CHECK_EQ(tfalloc_container_info_init("c", "_bad", "node", 0, &ci), TFALLOC_EINVAL);

	/* A snapshot now. */
	char path[4096];
	CHECK_EQ(tfalloc_dump_profile(path, sizeof(path)), 0);
	CHECK_EQ(access(path, R_OK), 0);
	CHECK_EQ(tfalloc_device_stats("cpu", &st), 0);
	CHECK_EQ(st.num_allocs > 10, 1);

	/* Left for the report: layer1 holds w1 (1000) and w2 (2000) at exit. */
	sink = w1;
	sink = w2;
	printf("LAYER1 %u\n", h.id);
	printf("api done, %d failures\n", failures);
	return failures != 0;
}

static int
inactive(void)
{
	tfalloc_resource_handle_t h;
	tfalloc_stats_t st;
	tfalloc_pointer_info_t pi;

	memset(&h, 0x55, sizeof(h));
	memset(&st, 0x55, sizeof(st));
	CHECK_EQ(tfalloc_active(), 0);
	CHECK_EQ(tfalloc_scope_enter("a", "b"), TFALLOC_ENOTACTIVE);
	CHECK_EQ(tfalloc_scope_exit(), TFALLOC_ENOTACTIVE);
	CHECK_EQ(tfalloc_resource_create("a", "t", "b", NULL, &h), TFALLOC_ENOTACTIVE);
	CHECK_EQ(h.id, 0);
	CHECK_EQ(tfalloc_device_stats("cpu", &st), TFALLOC_ENOTACTIVE);
	CHECK_EQ(st.num_allocs, 0);
	CHECK_EQ(tfalloc_pointer_info(&h, &pi), TFALLOC_ENOTACTIVE);
	CHECK_EQ(tfalloc_container_cleanup("a", NULL), TFALLOC_ENOTACTIVE);
	printf("inactive done, %d failures\n", failures);
	return failures != 0;
}

struct named {
	const char *name;
	size_t bytes;
	pthread_barrier_t *go;
};

static void *
named_thread(void *arg)
{
	struct named *n = arg;

	pthread_setname_np(pthread_self(), n->name);
	pthread_barrier_wait(n->go);
	/* Kept until exit: each thread's resource holds exactly its bytes. */
	for (size_t done = 0; done < n->bytes; done += 1000)
		sink = malloc(1000);
	return NULL;
}

static int
threads(void)
{
	pthread_t t[2];
	pthread_barrier_t go;
	struct named n[2] = { { "pool-a", 10000, &go }, { "pool-b", 30000, &go } };

	pthread_barrier_init(&go, NULL, 2);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, named_thread, &n[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	/* A scope wins over the thread's resource while it is open. */
	tfalloc_scope_enter("explicit", "scope");
	sink = malloc(5000);
	tfalloc_scope_exit();
	printf("threads done\n");
	return 0;
}

static pthread_barrier_t scoped_go, scoped_done;

static void *
scoped_thread(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&scoped_go);
	/* No scope here, whatever the main thread has current. */
	for (int i = 0; i < 10; i++)
		sink = malloc(111);
	pthread_barrier_wait(&scoped_done);
	return NULL;
}

static int
scopes(void)
{
	pthread_t t;
	tfalloc_resource_handle_t h;
	tfalloc_stats_t st;

	pthread_barrier_init(&scoped_go, NULL, 2);
	pthread_barrier_init(&scoped_done, NULL, 2);
	pthread_create(&t, NULL, scoped_thread, NULL);
	CHECK_EQ(tfalloc_scope_enter("main", "only"), 0);
	pthread_barrier_wait(&scoped_go);
	pthread_barrier_wait(&scoped_done);
	sink = malloc(222);
	CHECK_EQ(tfalloc_scope_exit(), 0);
	pthread_join(t, NULL);
	CHECK_EQ(tfalloc_resource_lookup("main", "scope", "only", &h), 0);
	CHECK_EQ(tfalloc_resource_stats(&h, "cpu", &st), 0);
	CHECK_EQ(st.total_bytes, 222);
	CHECK_EQ(st.num_allocs, 1);
	printf("scopes done, %d failures\n", failures);
	return failures != 0;
}

int
main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "api";

	if (strcmp(mode, "api") == 0)
		return api();
	if (strcmp(mode, "inactive") == 0)
		return inactive();
	if (strcmp(mode, "threads") == 0)
		return threads();
	if (strcmp(mode, "scopes") == 0)
		return scopes();
	if (strcmp(mode, "dumploop") == 0) {
		printf("dumping\n");
		fflush(stdout);
		for (;;)
			tfalloc_dump_profile(NULL, 0);
	}
	fprintf(stderr, "usage: tp_control api|inactive|threads|scopes\n");
	return 2;
}
