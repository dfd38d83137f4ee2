/* SPDX-License-Identifier: MIT */
/*
 * C++ operator new and delete in every form, in C.  The shim does not link
 * libstdc++: in a C program that would load it, and its start-up allocations
 * (the emergency exception pool) would show up as the program's.  The few
 * C++ runtime services the standard semantics need (the new-handler,
 * throwing std::bad_alloc) are looked up in the process when memory is
 * refused, which only a C++ program can reach.
 *
 * Compiled with -fexceptions: a new-handler or bad_alloc may unwind through
 * these frames.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/allocator.h"
#include "core/common.h"
#include "core/log.h"
#include "core/ptr_table.h"
#include "core/shim.h"
#include "core/thread.h"

typedef void (*new_handler_t)(void);

/* preload/new_handler.cpp: calls h, false when it threw. */
bool tfa_call_new_handler_nothrow(new_handler_t h);

static void *
cxx_symbol(const char *name)
{
	tfa_guard_enter();
	void *p = dlsym(RTLD_DEFAULT, name);
	tfa_guard_exit();
	return p;
}

static new_handler_t
current_new_handler(void)
{
	static void *get;
	new_handler_t (*fn)(void);

	if (get == NULL)
		get = cxx_symbol("_ZSt15get_new_handlerv");
	if (get == NULL)
		return NULL;
	memcpy(&fn, &get, sizeof(fn));
	return fn();
}

static void __attribute__((noreturn))
throw_bad_alloc(void)
{
	static void *thrower;
	void (*fn)(void);

	if (thrower == NULL)
		thrower = cxx_symbol("_ZSt17__throw_bad_allocv");
	if (thrower != NULL) {
		memcpy(&fn, &thrower, sizeof(fn));
		fn();
	}
	tfa_log("operator new: out of memory and no C++ runtime to throw std::bad_alloc; aborting");
	abort();
}

/* The standard's loop: allocate; on failure call the new-handler, or give up. */
static void *
cxx_new(size_t size, size_t alignment, uint8_t kind, bool nothrow)
{
	if (alignment != 0 && !tfa_is_pow2(alignment)) {
		if (nothrow)
			return NULL;
		throw_bad_alloc();
	}
	if (alignment <= TFA_MIN_HOST_ALIGNMENT)
		alignment = 0;
	for (;;) {
		void *p = tfa_shim_alloc(size, alignment, kind, false);
		if (tfa_likely(p != NULL))
			return p;
		new_handler_t h = current_new_handler();
		if (h == NULL) {
			if (nothrow)
				return NULL;
			throw_bad_alloc();
		}
		if (!nothrow)
			h();
		else if (!tfa_call_new_handler_nothrow(h))
			return NULL;
	}
}

static void
cxx_delete(void *ptr, uint8_t kind)
{
	if (ptr == NULL)
		return;
	/* errno is kept there. */
	tfa_shim_free(ptr, kind);
}

#define NEW_KIND    TFA_KIND_NEW
#define ARRAY_KIND  TFA_KIND_NEW_ARRAY
#define NOTHROW_T   const void *
#define ALIGN_T     size_t

/* Mangled names: n = new, a = array, d = delete, m = size_t, St11align_val_t, RKSt9nothrow_t. */
TFA_EXPORT void *_Znwm(size_t size);
TFA_EXPORT void *_Znam(size_t size);
TFA_EXPORT void *_ZnwmRKSt9nothrow_t(size_t size, NOTHROW_T nt);
TFA_EXPORT void *_ZnamRKSt9nothrow_t(size_t size, NOTHROW_T nt);
TFA_EXPORT void *_ZnwmSt11align_val_t(size_t size, ALIGN_T al);
TFA_EXPORT void *_ZnamSt11align_val_t(size_t size, ALIGN_T al);
TFA_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, ALIGN_T al, NOTHROW_T nt);
TFA_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, ALIGN_T al, NOTHROW_T nt);
TFA_EXPORT void _ZdlPv(void *p);
TFA_EXPORT void _ZdaPv(void *p);
TFA_EXPORT void _ZdlPvm(void *p, size_t size);
TFA_EXPORT void _ZdaPvm(void *p, size_t size);
TFA_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, NOTHROW_T nt);
TFA_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, NOTHROW_T nt);
TFA_EXPORT void _ZdlPvSt11align_val_t(void *p, ALIGN_T al);
TFA_EXPORT void _ZdaPvSt11align_val_t(void *p, ALIGN_T al);
TFA_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t size, ALIGN_T al);
TFA_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t size, ALIGN_T al);
TFA_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, ALIGN_T al, NOTHROW_T nt);
TFA_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, ALIGN_T al, NOTHROW_T nt);

TFA_EXPORT void *
_Znwm(size_t size)
{
	return cxx_new(size, 0, NEW_KIND, false);
}

TFA_EXPORT void *
_Znam(size_t size)
{
	return cxx_new(size, 0, ARRAY_KIND, false);
}

TFA_EXPORT void *
_ZnwmRKSt9nothrow_t(size_t size, NOTHROW_T nt)
{
	(void)nt;
	return cxx_new(size, 0, NEW_KIND, true);
}

TFA_EXPORT void *
_ZnamRKSt9nothrow_t(size_t size, NOTHROW_T nt)
{
	(void)nt;
	return cxx_new(size, 0, ARRAY_KIND, true);
}

TFA_EXPORT void *
_ZnwmSt11align_val_t(size_t size, ALIGN_T al)
{
	return cxx_new(size, al, NEW_KIND, false);
}

TFA_EXPORT void *
_ZnamSt11align_val_t(size_t size, ALIGN_T al)
{
	return cxx_new(size, al, ARRAY_KIND, false);
}

TFA_EXPORT void *
_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, ALIGN_T al, NOTHROW_T nt)
{
	(void)nt;
	return cxx_new(size, al, NEW_KIND, true);
}

TFA_EXPORT void *
_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, ALIGN_T al, NOTHROW_T nt)
{
	(void)nt;
	return cxx_new(size, al, ARRAY_KIND, true);
}

/*
 * Deletes: the size and alignment arguments are not trusted (a wrong size
 * would corrupt a sized backend free); the record knows both.
 */
TFA_EXPORT void
_ZdlPv(void *p)
{
	cxx_delete(p, NEW_KIND);
}

TFA_EXPORT void
_ZdaPv(void *p)
{
	cxx_delete(p, ARRAY_KIND);
}

TFA_EXPORT void
_ZdlPvm(void *p, size_t size)
{
	(void)size;
	cxx_delete(p, NEW_KIND);
}

TFA_EXPORT void
_ZdaPvm(void *p, size_t size)
{
	(void)size;
	cxx_delete(p, ARRAY_KIND);
}

TFA_EXPORT void
_ZdlPvRKSt9nothrow_t(void *p, NOTHROW_T nt)
{
	(void)nt;
	cxx_delete(p, NEW_KIND);
}

TFA_EXPORT void
_ZdaPvRKSt9nothrow_t(void *p, NOTHROW_T nt)
{
	(void)nt;
	cxx_delete(p, ARRAY_KIND);
}

TFA_EXPORT void
_ZdlPvSt11align_val_t(void *p, ALIGN_T al)
{
	(void)al;
	cxx_delete(p, NEW_KIND);
}

TFA_EXPORT void
_ZdaPvSt11align_val_t(void *p, ALIGN_T al)
{
	(void)al;
	cxx_delete(p, ARRAY_KIND);
}

TFA_EXPORT void
_ZdlPvmSt11align_val_t(void *p, size_t size, ALIGN_T al)
{
	(void)size;
	(void)al;
	cxx_delete(p, NEW_KIND);
}

TFA_EXPORT void
_ZdaPvmSt11align_val_t(void *p, size_t size, ALIGN_T al)
{
	(void)size;
	(void)al;
	cxx_delete(p, ARRAY_KIND);
}

TFA_EXPORT void
_ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, ALIGN_T al, NOTHROW_T nt)
{
	(void)al;
	(void)nt;
	cxx_delete(p, NEW_KIND);
}

TFA_EXPORT void
_ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, ALIGN_T al, NOTHROW_T nt)
{
	(void)al;
	(void)nt;
	cxx_delete(p, ARRAY_KIND);
}
