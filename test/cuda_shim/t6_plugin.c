/* SPDX-License-Identifier: MIT */
/*
 * A plugin loaded with RTLD_LOCAL that looks its own private symbol up with
 * dlsym(RTLD_DEFAULT, ...): glibc searches the caller's local scope too, so
 * it is found only when glibc sees the plugin as the caller (CUDA.md T6).
 */
#include <dlfcn.h>
#include <stddef.h>

int t6_plugin_private(void);
int t6_plugin_run(void);
int cu_t6_plugin_symbol(void);

int
t6_plugin_private(void)
{
	return 42;
}

/* A "cu" name: the shim's handle path looks at it and must leave it (and dlerror) alone. */
int
cu_t6_plugin_symbol(void)
{
	return 7;
}

int
t6_plugin_run(void)
{
	int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "t6_plugin_private");
	return f != NULL ? f() : -1;
}
