/* SPDX-License-Identifier: MIT */
/*
 * dlclose: the unwinder's caches know code by its address, and a library
 * loaded later may be mapped where the closed one was.  They are flushed
 * after the real dlclose: a rule a walk computed before, or while the library
 * went, is of an older generation then (core/cfi.c).  The loader's own
 * unloads (iconv's gconv modules) do not come through here.
 *
 * dlopen with RTLD_DEEPBIND: the objects it loads look their symbols up in
 * their own dependencies first, so their malloc, free, operator new, dlopen
 * and sigaction are libc's and libstdc++'s, not the shim's.  Their blocks went
 * unseen, a block they freed that the program made aborted in glibc's free,
 * and one the program freed that they made was a foreign free.  After the
 * real dlopen, every reference of a new object to a name the shim exports
 * that the deep lookup found in libc, the C++ runtime or CUDA's libraries is
 * bound to what the global scope gives (the shim's, or the program's own):
 * what the same object would have had without RTLD_DEEPBIND.  Every other
 * symbol keeps its deep binding, and so does a library's own allocator
 * (shim_stands_in_for).  Their constructors have run by then, on
 * libc's functions: what they made is glibc's, and goes back to glibc when
 * freed through the shim (tfa_glibc_foreign_free, registry/backends.h).
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/common.h"
#include "core/elf.h"
#include "core/log.h"
#include "core/modules.h"
#include "core/shim.h"
#include "core/thread.h"
#include "core/unwind.h"
#include "cuda_hooks/cuda_hooks.h"

TFA_EXPORT int dlclose(void *handle);

int
dlclose(void *handle)
{
	static int (*real)(void *);
	int (*fn)(void *) = __atomic_load_n(&real, __ATOMIC_RELAXED);

	if (fn == NULL) {
		tfa_guard_enter();
		void *sym = dlsym(RTLD_NEXT, "dlclose");
		tfa_guard_exit();
		if (sym == NULL) {
			errno = ENOSYS;
			return -1;
		}
		__builtin_memcpy(&fn, &sym, sizeof(fn));
		__atomic_store_n(&real, fn, __ATOMIC_RELAXED);
	}
	int r = fn(handle);
	int saved_errno = errno;
	tfa_unwind_flush_caches();
	errno = saved_errno;
	return r;
}

/* ---- dlopen (dlopen_entry.S) ---------------------------------------------------------------- */

/* Read by dlopen_entry.S. */
__attribute__((used)) void *(*tfa_real_dlopen)(const char *file, int mode);

static void *
no_dlopen(const char *file, int mode)
{
	(void)file;
	(void)mode;
	return NULL;
}

/* dlopen_entry.S, before the constructor: the function to jump to. */
__attribute__((used)) void *(*tfa_dlopen_resolve(void))(const char *, int);
__attribute__((used)) void *(*tfa_dlopen_resolve(void))(const char *, int)
{
	void *(*fn)(const char *, int) = __atomic_load_n(&tfa_real_dlopen, __ATOMIC_ACQUIRE);
	if (fn != NULL)
		return fn;
	void *sym = dlsym(RTLD_NEXT, "dlopen");
	if (sym == NULL)
		return no_dlopen;
	__builtin_memcpy(&fn, &sym, sizeof(fn));
	__atomic_store_n(&tfa_real_dlopen, fn, __ATOMIC_RELEASE);
	return fn;
}

__attribute__((constructor(TFA_CTOR_PRIO_REGISTRY))) static void
dl_hooks_resolve(void)
{
	(void)tfa_dlopen_resolve();
}

/* ---- the names the shim exports, and what the global scope binds them to -------------------- */

#define EXPORTS_MAX   512
#define EXPORT_SLOTS  1024 /* a power of two, at most half full */

typedef struct export_s {
	const char *name;
	uint32_t hash;
	uintptr_t target;
} export_t;

static struct {
	pthread_once_t once;
	uint32_t count;
	export_t exports[EXPORTS_MAX];
	uint16_t slots[EXPORT_SLOTS]; /* index + 1; 0: empty */
	uintptr_t own_base;
} ex = { .once = PTHREAD_ONCE_INIT };

static uint32_t
gnu_hash(const char *s)
{
	uint32_t h = 5381;

	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
		h = h * 33 + *p;
	return h;
}

/* A dynamic section's address entries: relocated by glibc on x86-64 and AArch64, not on every target. */
static uintptr_t
dyn_ptr(uintptr_t base, ElfW(Addr) p)
{
	return p < base ? base + p : p;
}

/* The number of entries of a .dynsym, from its GNU hash table. */
static uint32_t
gnu_hash_symbols(const uint32_t *gh)
{
	uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_words = gh[2];
	const ElfW(Addr) *bloom = (const ElfW(Addr) *)(const void *)&gh[4];
	const uint32_t *buckets = (const uint32_t *)(const void *)&bloom[bloom_words];
	const uint32_t *chain = &buckets[nbuckets];
	uint32_t last = 0;

	for (uint32_t b = 0; b < nbuckets; b++)
		if (buckets[b] > last)
			last = buckets[b];
	if (last < symoffset)
		return symoffset;
	while ((chain[last - symoffset] & 1) == 0)
		last++;
	return last + 1;
}

static const export_t *
export_find(const char *name)
{
	uint32_t h = gnu_hash(name);

	for (uint32_t i = h & (EXPORT_SLOTS - 1);; i = (i + 1) & (EXPORT_SLOTS - 1)) {
		uint16_t s = ex.slots[i];
		if (s == 0)
			return NULL;
		const export_t *e = &ex.exports[s - 1];
		if (e->hash == h && strcmp(e->name, name) == 0)
			return e;
	}
}

static void
exports_load(void)
{
	Dl_info info;
	struct link_map *own = NULL;

	if (dladdr1((void *)exports_load, &info, (void **)&own, RTLD_DL_LINKMAP) == 0 || own == NULL)
		return;
	uintptr_t base = own->l_addr;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const uint32_t *gh = NULL;
	for (const ElfW(Dyn) *d = own->l_ld; d->d_tag != DT_NULL; d++) {
		if (d->d_tag == DT_SYMTAB)
			symtab = (const ElfW(Sym) *)dyn_ptr(base, d->d_un.d_ptr);
		else if (d->d_tag == DT_STRTAB)
			strtab = (const char *)dyn_ptr(base, d->d_un.d_ptr);
		else if (d->d_tag == DT_GNU_HASH)
			gh = (const uint32_t *)dyn_ptr(base, d->d_un.d_ptr);
	}
	if (symtab == NULL || strtab == NULL || gh == NULL) {
		TFA_LOG_ONCE("dlopen(RTLD_DEEPBIND): libtfalloc.so's own exports cannot be read (no GNU hash "
			     "table); deep-bound libraries keep libc's malloc, and their blocks go unseen");
		return;
	}
	ex.own_base = base;
	void *(*real_dlsym)(void *, const char *) = tfa_cuda_real_dlsym();
	uint32_t n = gnu_hash_symbols(gh);
	for (uint32_t i = 1; i < n && ex.count < EXPORTS_MAX; i++) {
		const ElfW(Sym) *s = &symtab[i];
		unsigned type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
		if (s->st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_GNU_IFUNC)
		    || (bind != STB_GLOBAL && bind != STB_WEAK))
			continue;
		const char *name = strtab + s->st_name;
		if (strcmp(name, "_init") == 0 || strcmp(name, "_fini") == 0)
			continue;
		/* The global scope's binding: the shim's, or the program's where it defines the name. */
		void *target = real_dlsym != NULL ? real_dlsym(RTLD_DEFAULT, name) : NULL;
		export_t *e = &ex.exports[ex.count];
		e->name = name;
		e->hash = gnu_hash(name);
		e->target = target != NULL ? (uintptr_t)target : base + s->st_value;
		uint32_t j = e->hash & (EXPORT_SLOTS - 1);
		while (ex.slots[j] != 0)
			j = (j + 1) & (EXPORT_SLOTS - 1);
		ex.slots[j] = (uint16_t)(++ex.count);
	}
}

/* ---- binding the new objects ----------------------------------------------------------------- */

/* On the caller's stack (4 KiB): with more objects loaded, every object is bound. */
#define BASES_MAX 512

typedef struct loaded_s {
	uintptr_t bases[BASES_MAX];
	size_t count;
	bool overflow; /* more objects than bases: every object is bound */
} loaded_t;

static int
loaded_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
	loaded_t *l = arg;

	(void)size;
	if (l->count == BASES_MAX) {
		l->overflow = true;
		return 1;
	}
	l->bases[l->count++] = info->dlpi_addr;
	return 0;
}

static bool
loaded_before(const loaded_t *l, uintptr_t base)
{
	if (l->overflow)
		return false;
	for (size_t i = 0; i < l->count; i++)
		if (l->bases[i] == base)
			return true;
	return false;
}

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT  R_X86_64_GLOB_DAT
#define R_ABS64     R_X86_64_64
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT  R_AARCH64_GLOB_DAT
#define R_ABS64     R_AARCH64_ABS64
#endif

/* A reference of a new object to a name the shim exports. */
typedef struct candidate_s {
	uintptr_t *slot;
	uintptr_t relro_start, relro_end; /* the pages glibc made read-only in its object */
	uintptr_t obj_start, obj_end;     /* its object's address range: a lazy slot points there */
	uint16_t export;
} candidate_t;

typedef struct rebind_s {
	const loaded_t *before;
	candidate_t *c; /* arena memory */
	size_t n, cap;
	bool full;      /* candidates past cap: left deep-bound */
} rebind_t;

static void
candidate_add(rebind_t *rb, const candidate_t *c)
{
	if (rb->n == rb->cap) {
		size_t cap = rb->cap != 0 ? rb->cap * 2 : 256;
		candidate_t *grown = tfa_arena_map(cap * sizeof(*grown));
		if (grown == NULL) {
			rb->full = true;
			return;
		}
		if (rb->c != NULL) {
			memcpy(grown, rb->c, rb->n * sizeof(*grown));
			tfa_arena_unmap(rb->c, rb->cap * sizeof(*rb->c));
		}
		rb->c = grown;
		rb->cap = cap;
	}
	rb->c[rb->n++] = *c;
}

static void
collect_relocs(rebind_t *rb, candidate_t *proto, uintptr_t base, const ElfW(Sym) *symtab, const char *strtab,
	       const ElfW(Rela) *r, size_t bytes)
{
	for (size_t i = 0; i < bytes / sizeof(*r); i++) {
		unsigned type = ELF64_R_TYPE(r[i].r_info);
		uint32_t sym = ELF64_R_SYM(r[i].r_info);
		if (sym == 0 || (type != R_JUMP_SLOT && type != R_GLOB_DAT && (type != R_ABS64 || r[i].r_addend != 0)))
			continue;
		const export_t *e = export_find(strtab + symtab[sym].st_name);
		if (e == NULL)
			continue;
		proto->slot = (uintptr_t *)(base + r[i].r_offset);
		proto->export = (uint16_t)(e - ex.exports);
		candidate_add(rb, proto);
	}
}

/* Under dl_iterate_phdr's lock: only collects (dlsym and dladdr take the loader's lock). */
static int
collect_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
	rebind_t *rb = arg;
	uintptr_t base = info->dlpi_addr;
	const ElfW(Dyn) *dyn = NULL;
	candidate_t proto = { .obj_start = UINTPTR_MAX };
	uintptr_t page = (uintptr_t)getpagesize() - 1;

	(void)size;
	if (base == ex.own_base || loaded_before(rb->before, base))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_DYNAMIC) {
			dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
		} else if (ph->p_type == PT_GNU_RELRO) {
			proto.relro_start = (base + ph->p_vaddr) & ~page;
			proto.relro_end = (base + ph->p_vaddr + ph->p_memsz) & ~page;
		} else if (ph->p_type == PT_LOAD) {
			proto.obj_start = TFA_MIN(proto.obj_start, base + ph->p_vaddr);
			proto.obj_end = TFA_MAX(proto.obj_end, base + ph->p_vaddr + ph->p_memsz);
		}
	}
	if (dyn == NULL)
		return 0;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const ElfW(Rela) *rela = NULL, *jmprel = NULL;
	size_t rela_bytes = 0, jmprel_bytes = 0;
	bool plt_rela = true;
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(base, d->d_un.d_ptr); break;
		case DT_STRTAB: strtab = (const char *)dyn_ptr(base, d->d_un.d_ptr); break;
		case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(base, d->d_un.d_ptr); break;
		case DT_RELASZ: rela_bytes = d->d_un.d_val; break;
		case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(base, d->d_un.d_ptr); break;
		case DT_PLTRELSZ: jmprel_bytes = d->d_un.d_val; break;
		case DT_PLTREL: plt_rela = d->d_un.d_val == DT_RELA; break;
		default: break;
		}
	}
	if (symtab == NULL || strtab == NULL)
		return 0;
	if (rela != NULL)
		collect_relocs(rb, &proto, base, symtab, strtab, rela, rela_bytes);
	if (jmprel != NULL && plt_rela)
		collect_relocs(rb, &proto, base, symtab, strtab, jmprel, jmprel_bytes);
	return 0;
}

/*
 * Whether a function the shim stands in for is defined there: libc (and the
 * loader), the C++ runtime, CUDA's libraries.  A library with an allocator of
 * its own (a static tcmalloc that exports malloc) keeps it: it may also call
 * it directly, and a block of the shim's given to its free would crash it.
 */
static bool
shim_stands_in_for(const void *fn)
{
	static const char *const providers[] = { "libc.so",	"ld-linux", "libstdc++.so", "libc++.so",
						 "libc++abi.so", "libcudart.so", "libcuda.so",	"libdl.so",
						 "libpthread.so" };
	Dl_info info;

	if (fn == NULL || dladdr(fn, &info) == 0 || info.dli_fname == NULL)
		return false;
	const char *base = strrchr(info.dli_fname, '/');
	base = base != NULL ? base + 1 : info.dli_fname;
	for (size_t i = 0; i < TFA_ARRAY_SIZE(providers); i++)
		if (strncmp(base, providers[i], strlen(providers[i])) == 0)
			return true;
	return false;
}

static void
bind_candidates(rebind_t *rb, void *handle)
{
	void *(*real_dlsym)(void *, const char *) = tfa_cuda_real_dlsym();

	for (size_t i = 0; i < rb->n; i++) {
		const candidate_t *c = &rb->c[i];
		const export_t *e = &ex.exports[c->export];
		uintptr_t now = __atomic_load_n(c->slot, __ATOMIC_RELAXED);
		if (now == e->target)
			continue;
		/* A lazy slot points into its own object's PLT still: what it would come to. */
		void *deep = (void *)now;
		if (now >= c->obj_start && now < c->obj_end)
			deep = real_dlsym != NULL ? real_dlsym(handle, e->name) : NULL;
		if (!shim_stands_in_for(deep))
			continue;
		bool relro = (uintptr_t)c->slot >= c->relro_start && (uintptr_t)c->slot < c->relro_end;
		void *page = (void *)((uintptr_t)c->slot & ~((uintptr_t)getpagesize() - 1));
		if (relro && mprotect(page, (size_t)getpagesize(), PROT_READ | PROT_WRITE) != 0) {
			TFA_LOG_ONCE("dlopen(RTLD_DEEPBIND): cannot bind a library's %s to tfalloc's: mprotect: %s; "
				     "what it makes through it goes unseen",
				     e->name, strerror(errno));
			continue;
		}
		__atomic_store_n(c->slot, e->target, __ATOMIC_RELAXED);
		if (relro && mprotect(page, (size_t)getpagesize(), PROT_READ) != 0)
			TFA_LOG_ONCE("dlopen(RTLD_DEEPBIND): a library's relocations stay writable: mprotect: %s",
				     strerror(errno));
	}
	if (rb->full)
		TFA_LOG_ONCE("dlopen(RTLD_DEEPBIND): no memory to bind every reference to tfalloc's functions; "
			     "what the others make goes unseen");
	if (rb->c != NULL)
		tfa_arena_unmap(rb->c, rb->cap * sizeof(*rb->c));
}

/* ---- the caller's view of the file name ------------------------------------------------------ */

/* $ORIGIN and ${ORIGIN} in a name: the directory of the calling object. */
static const char *
expand_origin(const char *file, struct link_map *caller, char *buf, size_t size)
{
	char origin[PATH_MAX];
	const char *obj = caller != NULL ? caller->l_name : NULL;

	if (obj == NULL || obj[0] == '\0') {
		if (tfa_modules_exe_path(origin, sizeof(origin)) == 0)
			return file;
	} else if (strlen(obj) < sizeof(origin)) {
		memcpy(origin, obj, strlen(obj) + 1);
	} else {
		return file;
	}
	char *slash = strrchr(origin, '/');
	if (slash == NULL)
		return file;
	*slash = '\0';
	size_t olen = strlen(origin), out = 0;
	for (const char *p = file; *p != '\0';) {
		size_t skip = strncmp(p, "${ORIGIN}", 9) == 0 ? 9
			      : (strncmp(p, "$ORIGIN", 7) == 0 && !(p[7] == '_' || (p[7] >= 'A' && p[7] <= 'Z')
								   || (p[7] >= 'a' && p[7] <= 'z')
								   || (p[7] >= '0' && p[7] <= '9')))
				      ? 7
				      : 0;
		const char *add = skip != 0 ? origin : p;
		size_t len = skip != 0 ? olen : 1;
		if (out + len + 1 > size)
			return file;
		memcpy(buf + out, add, len);
		out += len;
		p += skip != 0 ? skip : 1;
	}
	buf[out] = '\0';
	return buf;
}

/* Whether an ELF file is of this process's class and machine: glibc's search passes over others. */
static bool
elf_for_this_process(const char *path)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	tfa_elf_t e;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ours = true; /* what is no ELF at all, glibc's dlopen refuses: its answer */

	if (fd < 0)
		return false;
	if (tfa_elf_open(fd, head, &e))
		ours = tfa_elf_is_native(&e);
	close(fd);
	return ours;
}

/*
 * A bare name, opened from the directories the caller's own dlopen would
 * search (its RPATH, LD_LIBRARY_PATH, its RUNPATH, the system's), in their
 * order: a file of another ELF class or machine is passed over, as glibc's
 * search does; the first other file found is opened, and its answer is the
 * search's.  NULL, and *found false: none found.
 */
static void *
open_for_caller(const char *file, struct link_map *caller, void *(*real)(const char *, int), int mode,
		bool *found)
{
	union {
		Dl_serinfo si;
		char bytes[8192];
	} u;
	Dl_serinfo probe;
	char path[PATH_MAX];

	*found = false;
	if (caller == NULL || dlinfo(caller, RTLD_DI_SERINFOSIZE, &probe) != 0 || probe.dls_size > sizeof(u))
		return NULL;
	u.si.dls_size = probe.dls_size;
	u.si.dls_cnt = probe.dls_cnt;
	if (dlinfo(caller, RTLD_DI_SERINFO, &u.si) != 0)
		return NULL;
	size_t fl = strlen(file);
	for (unsigned i = 0; i < u.si.dls_cnt; i++) {
		const char *dir = u.si.dls_serpath[i].dls_name;
		size_t dl = strlen(dir);
		if (dl == 0 || dl + 1 + fl + 1 > sizeof(path))
			continue;
		memcpy(path, dir, dl);
		path[dl] = '/';
		memcpy(path + dl + 1, file, fl + 1);
		if (access(path, F_OK) != 0 || !elf_for_this_process(path))
			continue;
		*found = true;
		return real(path, mode);
	}
	return NULL;
}

__attribute__((used)) void *tfa_dlopen_deepbind(const char *file, int mode, void *caller);

__attribute__((used)) void *
tfa_dlopen_deepbind(const char *file, int mode, void *caller)
{
	void *(*real)(const char *, int) = tfa_dlopen_resolve();
	char path[PATH_MAX];
	const char *name = file;

	pthread_once(&ex.once, exports_load);
	tfa_shim_note_deepbind();
	struct link_map *cm = NULL;
	bool bare = false;
	if (file != NULL) {
		Dl_info info;
		if (dladdr1(caller, &info, (void **)&cm, RTLD_DL_LINKMAP) == 0)
			cm = NULL;
		if (strchr(file, '$') != NULL) {
			name = expand_origin(file, cm, path, sizeof(path));
		} else if (strchr(file, '/') == NULL) {
			/* Loaded already under that name: glibc matches it before any search. */
			void *h = real(file, mode | RTLD_NOLOAD);
			if (h != NULL)
				return h;
			bare = true;
		}
	}

	/* No lock across the real dlopen: the constructors it runs may dlopen too. */
	loaded_t before = { .count = 0 };
	(void)dl_iterate_phdr(loaded_visit, &before);
	bool found = false;
	void *h = bare ? open_for_caller(file, cm, real, mode, &found) : NULL;
	if (!found)
		h = real(name, mode);
	if (h != NULL && ex.count > 0) {
		int saved_errno = errno;
		rebind_t rb = { .before = &before };
		(void)dl_iterate_phdr(collect_visit, &rb);
		bind_candidates(&rb, h);
		errno = saved_errno;
	}
	return h;
}
