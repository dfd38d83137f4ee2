/* SPDX-License-Identifier: MIT */
/*
 * Stacks through code without unwind tables, after the program made more
 * than 32 pthread keys: tfalloc's own walk refuses them and libunwind's
 * unw_backtrace serves them, its trace cache and pthread key made at the
 * first such walk of each thread, inside an allocation (the key is a high
 * one, whose pthread_setspecific allocates).  The main thread and 3 others
 * each make 2,000 blocks through tp_nocfi_frames.c (no unwind tables) and
 * leak one of 777 bytes there; prints "NOCFI 4" when all are done.
 */
#include <pthread.h>

#include "tp_common.h"

void tp_nocfi_churn(int blocks);

static void *
worker(void *arg)
{
	tp_nocfi_churn(2000);
	return arg;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	pthread_key_t key;
	for (int i = 0; i < 40; i++)
		TP_CHECK(pthread_key_create(&key, NULL) == 0, "pthread_key_create");
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		TP_CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0, "pthread_create");
	tp_nocfi_churn(2000);
	for (int i = 0; i < 3; i++)
		TP_CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
	tp_out("NOCFI 4\n");
	return 0;
}
