/* SPDX-License-Identifier: MIT */
/*
 * Multi-threaded churn for a bounded time: NT threads make random malloc,
 * calloc, realloc, posix_memalign and free calls on random sizes, and hand
 * blocks to each other through mailboxes so that most frees are cross-thread.
 * Every call is mirrored in the ledger with atomics: the counts at exit are
 * exact.  A thread that drains its mailbox reallocs every 4th block it got
 * before it frees it.  At the end every block is freed except LEAK_PER_THREAD
 * blocks of each thread (known sizes).  argv[1]: seconds (default 1.0; the
 * run also stops after MAX_OPS operations per thread); argv[2]: threads
 * (default 4, at most MAX_NT); "baseline [threads]" starts and joins the same
 * threads, which do nothing.  Prints "churn: N operations" on stderr.
 *
 * TP_SECCOMP=kill or TP_SECCOMP=errno: before its threads start, the program
 * puts itself in a seccomp sandbox that kills the process for membarrier, or
 * refuses it (EPERM).  The program never makes that call; a tool that does
 * must not, or must do without it.
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>

#include "tp_common.h"

#define MAX_NT          64
#define SLOTS           512
#define MAILBOX         1024
#define MAX_OPS         2000000
#define LEAK_PER_THREAD 3

typedef struct mailbox_s {
	pthread_mutex_t lock;
	void *ptr[MAILBOX];
	size_t size[MAILBOX];
	int n;
} mailbox_t;

static mailbox_t boxes[MAX_NT];
static int NT = 4;
static double seconds = 1.0;
static int baseline;
static long long ops_done;

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned
rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 8) & 0xffffff;
}

static size_t
rnd_size(unsigned *s)
{
	unsigned r = rnd(s);
	if (r % 100 == 0)
		return 16384 + r % 70000;
	if (r % 10 == 0)
		return r % 4096;
	return 1 + r % 256;
}

/* Takes every block out of a mailbox and frees it. */
static void
drain(mailbox_t *b)
{
	void *ptr[MAILBOX];
	size_t size[MAILBOX];
	pthread_mutex_lock(&b->lock);
	int n = b->n;
	memcpy(ptr, b->ptr, sizeof(void *) * (size_t)n);
	memcpy(size, b->size, sizeof(size_t) * (size_t)n);
	b->n = 0;
	pthread_mutex_unlock(&b->lock);
	for (int i = 0; i < n; i++) {
		if (i % 4 == 3) {
			/* another thread's block, resized here first */
			size_t m = size[i] / 2 + 1;
			void *q = realloc(ptr[i], m);
			TP_CHECK(q != NULL, "realloc to %zu", m);
			tp_l_realloc_mt((long long)size[i], (long long)m);
			ptr[i] = q;
			size[i] = m;
		}
		free(ptr[i]);
		tp_l_free_mt((long long)size[i]);
	}
}

/* Hands a block to another thread; false when its mailbox is full. */
static int
post(mailbox_t *b, void *p, size_t n)
{
	int ok = 0;
	pthread_mutex_lock(&b->lock);
	if (b->n < MAILBOX) {
		b->ptr[b->n] = p;
		b->size[b->n] = n;
		b->n++;
		ok = 1;
	}
	pthread_mutex_unlock(&b->lock);
	return ok;
}

static void *
worker(void *arg)
{
	int t = (int)(intptr_t)arg;
	if (baseline)
		return NULL;
	unsigned seed = 12345u + (unsigned)t * 7919u;
	void *slot[SLOTS] = { 0 };
	size_t ssize[SLOTS] = { 0 };
	double end = now() + seconds;
	long ops = 0;
	for (; ops < MAX_OPS; ops++) {
		if ((ops & 1023) == 0 && now() > end)
			break;
		unsigned r = rnd(&seed);
		int i = (int)(r % SLOTS);
		unsigned op = (r >> 12) % 16;
		if (slot[i] == NULL) {
			size_t n = rnd_size(&seed);
			void *p;
			if (op < 10) {
				p = malloc(n);
			} else if (op < 13) {
				p = calloc(1, n);
			} else {
				p = NULL;
				TP_CHECK(posix_memalign(&p, (size_t)16 << (op - 13), n) == 0,
				         "posix_memalign");
			}
			TP_CHECK(p != NULL, "allocation of %zu", n);
			if (n > 0)
				((unsigned char *)p)[n - 1] = (unsigned char)t;
			tp_l_alloc_mt((long long)n);
			slot[i] = p;
			ssize[i] = n;
		} else if (op < 6) {
			free(slot[i]);
			tp_l_free_mt((long long)ssize[i]);
			slot[i] = NULL;
		} else if (op < 9) {
			size_t n = rnd_size(&seed) + 1;
			void *p = realloc(slot[i], n);
			TP_CHECK(p != NULL, "realloc to %zu", n);
			tp_l_realloc_mt((long long)ssize[i], (long long)n);
			slot[i] = p;
			ssize[i] = n;
		} else if (op < 14) {
			/* to another thread, which frees it */
			int o = (t + 1 + (int)(r % (NT - 1))) % NT;
			if (post(&boxes[o], slot[i], ssize[i]))
				slot[i] = NULL;
		} else {
			drain(&boxes[t]);
		}
	}
	drain(&boxes[t]);
	/* keep LEAK_PER_THREAD blocks of known size, free the rest */
	for (int i = 0; i < SLOTS; i++) {
		if (slot[i] != NULL) {
			free(slot[i]);
			tp_l_free_mt((long long)ssize[i]);
		}
	}
	for (int k = 0; k < LEAK_PER_THREAD; k++) {
		size_t n = 1000 + (size_t)t * 10 + (size_t)k;
		void *p = malloc(n);
		TP_CHECK(p != NULL, "malloc");
		TP_KEEP(p);
		tp_l_alloc_mt((long long)n);
	}
	TP_ATOMIC_ADD(&ops_done, ops);
	return NULL;
}

/* TP_SECCOMP: kill or refuse membarrier from here on (see the top). */
static void
sandbox(const char *how)
{
	unsigned action = strcmp(how, "kill") == 0 ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_ERRNO | 1u /* EPERM */;
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_membarrier, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, action),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	TP_CHECK(strcmp(how, "kill") == 0 || strcmp(how, "errno") == 0, "TP_SECCOMP=%s: kill or errno", how);
	TP_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");
	TP_CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0, "PR_SET_SECCOMP");
}

int
main(int argc, char **argv)
{
	const char *how = getenv("TP_SECCOMP");

	if (how != NULL && how[0] != '\0')
		sandbox(how);
	baseline = tp_is_baseline(argc, argv);
	if (!baseline && argc > 1)
		seconds = atof(argv[1]);
	if (argc > 2)
		NT = atoi(argv[2]);
	TP_CHECK(NT >= 2 && NT <= MAX_NT, "threads: 2 to %d", MAX_NT);
	tp_ledger.peak_unknown = 1;
	for (int t = 0; t < NT; t++)
		pthread_mutex_init(&boxes[t].lock, NULL);
	pthread_t th[MAX_NT];
	for (int t = 0; t < NT; t++)
		TP_CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0,
		         "pthread_create");
	for (int t = 0; t < NT; t++)
		TP_CHECK(pthread_join(th[t], NULL) == 0, "pthread_join");
	if (baseline)
		return 0;
	/* blocks posted after their owner's last drain */
	for (int t = 0; t < NT; t++)
		drain(&boxes[t]);
	tp_out("churn done\n");
	TP_CHECK(ops_done > 1000, "only %lld operations", ops_done);
	tp_printf(2, "churn: %lld operations\n", ops_done);
	tp_l_print();
	return 0;
}
