/* SPDX-License-Identifier: MIT */
/*
 * fork with CUDA memory live, through the runtime (-lcudart).  The doubles
 * keep working in the child (a real driver would refuse a child that
 * inherited an initialised CUDA; the shim's fork handling is what is tested).
 *
 *   parent   cuda:1 cudaMalloc 1 MiB (X, leaked), cuda_host cudaMallocHost 300
 *            (leaked); forks; after the child is done cudaMalloc 2222 on
 *            cuda:0 (leaked)
 *   child    inherits X and the ledger; frees X (cudaFree), cudaMalloc 4096 on
 *            cuda:1 (freed), cudaMallocHost 100 (leaked), exits 0 by exit()
 *            (or by _exit() with the argument "_exit")
 *
 * Both print their ledger ("process":"parent" / "child"), with "PARENT pid"
 * and "CHILD pid" lines; the child's ledger goes on from the parent's at the
 * fork.
 */
#include <sys/wait.h>

#include "fake_cuda.h"

#include "tc_common.h"

#define MiB (1024 * 1024)

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	int underscore = argc > 1 && strcmp(argv[1], "_exit") == 0;
	void *x = NULL, *h = NULL;
	TC_OK(cudaSetDevice(1));
	TC_OK(cudaMalloc(&x, 1 * MiB));
	tc_alloc(TC_DEV1, 1 * MiB);
	TC_OK(cudaMemset(x, 7, 1 * MiB));
	TC_OK(cudaMallocHost(&h, 300));
	tc_alloc(TC_HOST, 300);
	tp_out("PARENT %d\n", (int)getpid());
	pid_t pid = fork();
	TP_CHECK(pid >= 0, "fork");
	if (pid == 0) {
		tc_process = "child";
		TP_CHECK(((unsigned char *)x)[MiB - 1] == 7, "inherited block clobbered");
		TC_OK(cudaFree(x));
		tc_free(TC_DEV1, 1 * MiB);
		void *c = NULL, *ch = NULL;
		TC_OK(cudaMalloc(&c, 4096));
		tc_alloc(TC_DEV1, 4096);
		TC_OK(cudaFree(c));
		tc_free(TC_DEV1, 4096);
		TC_OK(cudaMallocHost(&ch, 100));
		tc_alloc(TC_HOST, 100);
		TP_KEEP(ch);
		tc_print();
		if (underscore)
			_exit(0);
		exit(0);
	}
	tp_out("CHILD %d\n", (int)pid);
	int status;
	TP_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	TP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
	tc_process = "parent";
	TC_OK(cudaSetDevice(0));
	void *y = NULL;
	TC_OK(cudaMalloc(&y, 2222));
	tc_alloc(TC_DEV0, 2222);
	TP_KEEP(y);
	TP_KEEP(x);
	TP_KEEP(h);
	tc_print();
	tp_out("DONE\n");
	return 0;
}
