/* SPDX-License-Identifier: MIT */
#include "core/modules.h"

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/lock.h"

typedef struct range_s {
	uint64_t start, end;
} range_t;

typedef struct view_s {
	uint32_t count;
	range_t ranges[]; /* sorted by start */
} view_t;

static tfa_lock_t modules_lock = TFA_LOCK_INIT;
static tfa_module_t *first;
static tfa_module_t **tail = &first;
static uint32_t module_count;
static view_t *view; /* published with release; NULL until the first refresh */
static char exe_path[4096];
/* The loader's counters at the last refresh; read without the lock (a stale value only refreshes again). */
static unsigned long long seen_adds, seen_subs;

struct refresh {
	uint32_t stamp;
	uint64_t generation; /* of this walk: modules it met carry it */
	bool changed;        /* a module was added or found gone */
};

static uint64_t generation;
/* The walk that last met each module, parallel to the list (by discovery index). */
static uint64_t *met; /* arena memory, met_cap entries */
static uint32_t met_cap;

static bool
same_module(const tfa_module_t *m, const char *path, uint64_t bias, uint64_t start)
{
	return m->bias == bias && m->start == start && strcmp(m->path, path) == 0;
}

/* The GNU build id from the object's PT_NOTE segments, as mapped in memory. */
static void
read_build_id(const struct dl_phdr_info *info, tfa_module_t *m)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		const uint8_t *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const uint8_t *name = p + sizeof(*n);
			const uint8_t *desc = name + ((n->n_namesz + 3) & ~3u);
			const uint8_t *next = desc + ((n->n_descsz + 3) & ~3u);
			if (next > end || next <= p)
				break;
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4
			    && memcmp(name, "GNU", 4) == 0 && n->n_descsz > 0) {
				m->build_id_len = TFA_MIN(n->n_descsz, (uint32_t)TFA_BUILD_ID_MAX);
				memcpy(m->build_id, desc, m->build_id_len);
				return;
			}
			p = next;
		}
	}
}

/* Marks module number i as met by this walk; false when the table cannot grow. */
static bool
mark_met(uint32_t i, uint64_t gen)
{
	if (i >= met_cap) {
		uint32_t cap = met_cap == 0 ? 64 : met_cap * 2;
		while (cap <= i)
			cap *= 2;
		uint64_t *n = tfa_arena_alloc(cap * sizeof(*n));
		if (n == NULL)
			return false;
		if (met != NULL)
			memcpy(n, met, met_cap * sizeof(*n));
		met = n; /* the old array stays in the arena: refreshes are rare */
		met_cap = cap;
	}
	met[i] = gen;
	return true;
}

static int
visit(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct refresh *r = arg;
	uint64_t lo = UINT64_MAX, hi = 0;

	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uint64_t s = info->dlpi_addr + ph->p_vaddr;
		lo = TFA_MIN(lo, s);
		hi = TFA_MAX(hi, s + ph->p_memsz);
	}
	if (lo >= hi)
		return 0;
	const char *path = info->dlpi_name;
	if (path == NULL || path[0] == '\0')
		path = exe_path; /* the executable */
	uint32_t i = 0;
	/*
	 * Only a loaded entry can be this object: one loaded again after a
	 * dlclose gets an entry of its own, so that each entry's [seen_at,
	 * gone_at) says when it held its addresses.
	 */
	for (const tfa_module_t *m = first; m != NULL; m = m->next, i++) {
		if (!m->gone && same_module(m, path, info->dlpi_addr, lo)) {
			if (!mark_met(i, r->generation))
				return 1; /* no memory: a walk that cannot mark cannot tell what is gone */
			return 0;
		}
	}
	tfa_module_t *m = tfa_arena_alloc(sizeof(*m));
	const char *copy = tfa_arena_strndup(path, sizeof(exe_path) - 1);
	if (m == NULL || copy == NULL || !mark_met(i, r->generation))
		return 1; /* no memory: keep what is known */
	m->path = copy;
	m->bias = info->dlpi_addr;
	m->start = lo;
	m->end = hi;
	m->seen_at = r->stamp;
	read_build_id(info, m);
	__atomic_store_n(tail, m, __ATOMIC_RELEASE); /* readers walk the list without the lock */
	tail = &m->next;
	__atomic_store_n(&module_count, module_count + 1, __ATOMIC_RELEASE);
	r->changed = true;
	return 0;
}

/* A new sorted view of every module's range.  REQUIRES: modules lock. */
static void
publish_view(void)
{
	view_t *v = tfa_arena_alloc(sizeof(*v) + module_count * sizeof(range_t));

	if (v == NULL)
		return;
	uint32_t n = 0, seen = 0;
	for (const tfa_module_t *m = first; m != NULL && seen < module_count; m = m->next, seen++) {
		if (m->gone)
			continue;
		/* Insertion sort: refreshes are rare and modules few. */
		uint32_t i = n++;
		while (i > 0 && v->ranges[i - 1].start > m->start) {
			v->ranges[i] = v->ranges[i - 1];
			i--;
		}
		v->ranges[i].start = m->start;
		v->ranges[i].end = m->end;
	}
	v->count = n;
	__atomic_store_n(&view, v, __ATOMIC_RELEASE);
}

static int
peek_counters(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;

	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1; /* the counters are the loader's, the same in every entry */
}

bool
tfa_modules_changed(void)
{
	unsigned long long c[2] = { 0, 0 };

	dl_iterate_phdr(peek_counters, c);
	return c[0] != __atomic_load_n(&seen_adds, __ATOMIC_RELAXED)
	       || c[1] != __atomic_load_n(&seen_subs, __ATOMIC_RELAXED);
}

/*
 * /proc/self/exe, or without /proc (a chroot or sandbox that does not mount
 * it) the name execve was given (AT_EXECFN), made absolute from the working
 * directory: the first call's (the shim's start), kept for the later ones,
 * which may come after the program changed directory.
 */
size_t
tfa_modules_exe_path(char *out, size_t cap)
{
	static char found[4096];
	static size_t found_len;

	if (found_len == 0) {
		ssize_t n = readlink("/proc/self/exe", found, sizeof(found) - 1);
		if (n > 0) {
			found_len = (size_t)n;
		} else {
			const char *fn = (const char *)getauxval(AT_EXECFN);
			size_t len = fn != NULL ? strlen(fn) : 0, at = 0;
			if (len > 0 && fn[0] != '/' && getcwd(found, sizeof(found)) != NULL) {
				at = strlen(found);
				found[at++] = '/';
			}
			if (len > 0 && at + len < sizeof(found)) {
				memcpy(found + at, fn, len);
				found_len = at + len;
			}
		}
		found[found_len] = '\0';
	}
	if (found_len == 0 || found_len >= cap)
		return 0;
	memcpy(out, found, found_len + 1);
	return found_len;
}

bool
tfa_modules_refresh(uint32_t stamp)
{
	unsigned long long c[2] = { 0, 0 };

	if (!tfa_trylock(&modules_lock))
		return false;
	if (exe_path[0] == '\0' && tfa_modules_exe_path(exe_path, sizeof(exe_path)) == 0)
		memcpy(exe_path, "[executable]", sizeof("[executable]"));
	/* Read before the walk: a load during it makes the next check refresh again. */
	dl_iterate_phdr(peek_counters, c);
	struct refresh r = { .stamp = stamp, .generation = ++generation };
	if (dl_iterate_phdr(visit, &r) == 0) {
		/* A complete walk: whatever it did not meet is unloaded. */
		uint32_t i = 0;
		for (tfa_module_t *m = first; m != NULL; m = m->next, i++) {
			if (!m->gone && (i >= met_cap || met[i] != r.generation)) {
				m->gone_at = stamp;
				__atomic_store_n(&m->gone, true, __ATOMIC_RELEASE);
				r.changed = true;
			}
		}
		__atomic_store_n(&seen_adds, c[0], __ATOMIC_RELAXED);
		__atomic_store_n(&seen_subs, c[1], __ATOMIC_RELAXED);
	}
	if (r.changed || view == NULL)
		publish_view();
	tfa_unlock(&modules_lock);
	return true;
}

/*
 * The range of the last covers that found one: a stack's next frame is
 * mostly in the same module as the last.  Shared and racy, a hint only:
 * checked against the view it is used with.
 */
static uint32_t covers_hint;

bool
tfa_modules_covers(uintptr_t addr)
{
	const view_t *v = __atomic_load_n(&view, __ATOMIC_ACQUIRE);

	if (v == NULL)
		return false;
	/* The hint's range holds addr and is the last starting at or below it: the search's answer. */
	uint32_t h = __atomic_load_n(&covers_hint, __ATOMIC_RELAXED);
	if (h < v->count && v->ranges[h].start <= addr && addr < v->ranges[h].end
	    && (h + 1 == v->count || v->ranges[h + 1].start > addr))
		return true;
	/* The last range starting at or below addr; ranges of unloaded modules may overlap newer ones. */
	uint32_t lo = 0, hi = v->count;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (v->ranges[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t i = lo; i-- > 0;) {
		if (addr < v->ranges[i].end) {
			if (i == lo - 1 && i != h)
				__atomic_store_n(&covers_hint, i, __ATOMIC_RELAXED);
			return true;
		}
		/* Ranges do not nest in practice; a few steps back cover overlaps. */
		if (lo - i > 4)
			break;
	}
	return false;
}

const tfa_module_t *
tfa_modules_first(void)
{
	return __atomic_load_n(&first, __ATOMIC_ACQUIRE);
}

uint32_t
tfa_modules_count(void)
{
	return __atomic_load_n(&module_count, __ATOMIC_ACQUIRE);
}

void
tfa_modules_prefork(void)
{
	tfa_lock(&modules_lock);
}

void
tfa_modules_postfork_parent(void)
{
	tfa_unlock(&modules_lock);
}

void
tfa_modules_postfork_child(void)
{
	tfa_lock_init(&modules_lock);
}
