/* SPDX-License-Identifier: MIT */
/*
 * Loader hygiene under the shim's dlsym interposer (CUDA.md T6), and a
 * program that uses no CUDA loading no CUDA library.
 *
 *   t6_main PLUGIN.so   puts through libt6_next's RTLD_NEXT wrapper ("next:"),
 *                       then the RTLD_LOCAL plugin finds its own private
 *                       symbol through RTLD_DEFAULT; a "cu" name looked up in
 *                       the plugin's handle comes back unchanged, with
 *                       dlerror() NULL after it; dlsym(RTLD_DEFAULT,
 *                       "cuMemAlloc_v2") (the shim's export, when preloaded)
 *                       is not called; at the end /proc/self/maps must hold
 *                       no libcuda and no libcudart.
 * Prints "plugin 42", "cu symbol 7", "no cuda library", exits 0.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int
main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	puts("hello");
	fflush(stdout);
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int (*run)(void) = (int (*)(void))dlsym(h, "t6_plugin_run");
	if (run == NULL)
		return 1;
	printf("plugin %d\n", run());
	(void)dlerror();
	int (*cu)(void) = (int (*)(void))dlsym(h, "cu_t6_plugin_symbol");
	const char *err = dlerror();
	if (cu == NULL || err != NULL) {
		fprintf(stderr, "cu_t6_plugin_symbol: %p, dlerror %s\n", (void *)cu, err ? err : "NULL");
		return 1;
	}
	printf("cu symbol %d\n", cu());
	/* A lookup of a CUDA name in a handle that has none: NULL, and no CUDA loaded for it. */
	if (dlsym(h, "cuMemAlloc_v2") != NULL)
		return 1;
	(void)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	(void)dlsym(RTLD_DEFAULT, "cudaMalloc");
	FILE *m = fopen("/proc/self/maps", "r");
	char line[4096];
	int found = 0;
	while (m != NULL && fgets(line, sizeof(line), m) != NULL)
		if (strstr(line, "libcuda") != NULL)
			found = 1;
	if (m != NULL)
		fclose(m);
	puts(found ? "cuda library loaded" : "no cuda library");
	return found;
}
