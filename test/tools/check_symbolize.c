/* SPDX-License-Identifier: MIT */
/*
 * tools/symbolize.h on real code: the fixture library (symbolize_fixture.c
 * and symbolize_fixture_cxx.cc, -O2 -g) and copies of it (debug info behind a
 * .gnu_debuglink, symbols only, .dynsym only, another build id), loaded with
 * dlopen, run to collect return addresses, then dlclose'd: every address is
 * symbolized after its library is gone, from the module map this process
 * read of itself (dl_iterate_phdr, build ids from the PT_NOTE segments), as
 * `tfalloc report` symbolizes a profile from a finished run.
 *
 * The expected lines come from __LINE__ markers in the fixture; the expected
 * inline chains and lines of any address come from an independent oracle,
 * libdw's own dwarf_getscopes and dwarf_getscopes_die as eu-addr2line -i
 * uses them (slow, but straightforward).
 *
 * Not a test: `check_symbolize --bench [STRIDE]` times the symbolization of
 * every STRIDE-th byte of the code of every module of this process (libc,
 * libstdc++, libdw, ...), in random order; `check_symbolize --compare
 * [STRIDE] [MODULE]` checks that many addresses against the oracle.
 */
#include "tools/symbolize.h"

#include <check.h>
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "symbolize_fixture.h"

#ifndef TFA_SYMFIX_DIR
#	error "TFA_SYMFIX_DIR: the directory of the fixture libraries"
#endif

#define FIX_FULL     TFA_SYMFIX_DIR "/libtfa_symfix.so"
#define FIX_DEBUG    TFA_SYMFIX_DIR "/libtfa_symfix.debug"
#define FIX_DL       TFA_SYMFIX_DIR "/debuglink/libtfa_symfix_dl.so"
#define FIX_SYMONLY  TFA_SYMFIX_DIR "/libtfa_symfix_symonly.so"
#define FIX_DYNSYM   TFA_SYMFIX_DIR "/libtfa_symfix_dynsym.so"
#define FIX_OTHER_ID TFA_SYMFIX_DIR "/libtfa_symfix_other.so"

/*
 * For the helpers that --bench and --compare share with the tests: Check's
 * assertions work only inside a test (even passing ones report progress).
 */
static bool outside_check;
#define REQUIRE(cond)                                                                      \
	do {                                                                               \
		if (!outside_check) {                                                      \
			ck_assert(cond);                                                   \
		} else if (!(cond)) {                                                      \
			fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(2);                                                           \
		}                                                                          \
	} while (0)

#define MAP_MAX      512
#define BUILD_ID_MAX 64

/* ---- the module map of this process ------------------------------------------------------- */

struct map_segment {
	uint64_t lo, hi; /* an executable PT_LOAD */
	size_t module;
};

struct map {
	tfa_sym_module_t mods[MAP_MAX];
	char paths[MAP_MAX][PATH_MAX];
	uint8_t ids[MAP_MAX][BUILD_ID_MAX];
	size_t n;
	struct map_segment segs[MAP_MAX * 2];
	size_t nsegs;
};

/* The GNU build id in a PT_NOTE segment, copied to out; returns its length, 0: none. */
static size_t
note_build_id(const char *p, size_t len, uint8_t *out)
{
	const char *end = p + len;

	while (end - p >= (ptrdiff_t)sizeof(ElfW(Nhdr))) {
		const ElfW(Nhdr) *nh = (const void *)p;
		size_t namesz = (nh->n_namesz + 3) & ~(size_t)3;
		size_t descsz = (nh->n_descsz + 3) & ~(size_t)3;
		const char *name = p + sizeof(*nh);
		const char *desc = name + namesz;

		if ((size_t)(end - name) < namesz + descsz)
			break;
		if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4
		    && memcmp(name, "GNU", 4) == 0 && nh->n_descsz > 0
		    && nh->n_descsz <= BUILD_ID_MAX) {
			memcpy(out, desc, nh->n_descsz);
			return nh->n_descsz;
		}
		p = desc + descsz;
	}
	return 0;
}

static int
map_add(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct map *map = arg;
	tfa_sym_module_t *m;
	char *path;
	size_t i = map->n;

	(void)size;
	if (i >= MAP_MAX)
		return 1;
	m = &map->mods[i];
	path = map->paths[i];
	if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0') {
		ssize_t n = readlink("/proc/self/exe", path, PATH_MAX - 1);

		path[n > 0 ? n : 0] = '\0';
	} else {
		snprintf(path, PATH_MAX, "%s", info->dlpi_name);
	}
	m->path = path;
	m->bias = info->dlpi_addr;
	m->start = UINT64_MAX;
	m->end = 0;
	for (int k = 0; k < info->dlpi_phnum; k++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
		uint64_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;

		if (ph->p_type == PT_LOAD) {
			if ((ph->p_flags & PF_X) != 0 && map->nsegs < TFA_ARRAY_SIZE(map->segs))
				map->segs[map->nsegs++] = (struct map_segment){ lo, hi, i };
			lo &= ~(uint64_t)4095;
			hi = (hi + 4095) & ~(uint64_t)4095;
			if (lo < m->start)
				m->start = lo;
			if (hi > m->end)
				m->end = hi;
		} else if (ph->p_type == PT_NOTE && m->build_id == NULL) {
			m->build_id_len = note_build_id((const char *)(uintptr_t)lo, ph->p_memsz,
			                                map->ids[i]);
			m->build_id = m->build_id_len > 0 ? map->ids[i] : NULL;
		}
	}
	map->n++;
	return 0;
}

static struct map *
map_read(void)
{
	struct map *map = calloc(1, sizeof(*map));

	ck_assert_ptr_nonnull(map);
	dl_iterate_phdr(map_add, map);
	ck_assert_uint_gt(map->n, 1);
	return map;
}

/* The module of path; fails the test when none. */
static size_t
map_find(const struct map *map, const char *path)
{
	for (size_t i = 0; i < map->n; i++) {
		if (strcmp(map->mods[i].path, path) == 0)
			return i;
	}
	ck_abort_msg("%s is not in the module map", path);
	return 0;
}

/* ---- running a fixture ---------------------------------------------------------------------- */

struct run {
	struct map *map;
	struct tfa_symfix_result r;
	size_t module; /* the fixture in map */
};

/* dlopens path, runs the fixture, reads the module map, dlclose's it. */
static void
run_fixture(const char *path, struct run *out)
{
	tfa_symfix_run_fn fn;
	void *h;

	memset(out, 0, sizeof(*out));
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen %s: %s", path, dlerror());
	*(void **)&fn = dlsym(h, "tfa_symfix_run");
	ck_assert_ptr_nonnull(fn);
	fn(&out->r);
	out->map = map_read();
	out->module = map_find(out->map, path);
	ck_assert_int_eq(dlclose(h), 0);
	/* dlclose really unmapped it: the addresses are those of a library that is gone */
	ck_assert_ptr_null(dlopen(path, RTLD_NOW | RTLD_NOLOAD));
}

static tfa_symbolizer_t *
new_symbolizer(const struct map *map, const char *debuginfo_path)
{
	tfa_sym_options_t opts = { .debuginfo_path = debuginfo_path };
	char err[256];
	tfa_symbolizer_t *s = tfa_symbolizer_new(map->mods, map->n, &opts, err, sizeof(err));

	ck_assert_msg(s != NULL, "tfa_symbolizer_new: %s", err);
	return s;
}

static const char *
base_name(const char *path)
{
	const char *slash = path != NULL ? strrchr(path, '/') : NULL;

	return slash != NULL ? slash + 1 : path;
}

static const char *const site_functions[TFA_SYMFIX_SITES][TFA_SYMFIX_MAX_DEPTH] = {
	[TFA_SYMFIX_DIRECT] = { "tfa_symfix_direct" },
	[TFA_SYMFIX_INLINED] = { "tfa_symfix_inner", "tfa_symfix_middle", "tfa_symfix_outer" },
	[TFA_SYMFIX_CXX] = { "tfa_fixture::Widget<int>::poke(int, tfa_symfix_site*)" },
};
static const char *const site_files[TFA_SYMFIX_SITES] = {
	[TFA_SYMFIX_DIRECT] = "symbolize_fixture.c",
	[TFA_SYMFIX_INLINED] = "symbolize_fixture.c",
	[TFA_SYMFIX_CXX] = "symbolize_fixture_cxx.cc",
};

/* The frames of every call site, with full debug info (from wherever it came). */
static void
check_sites_with_lines(tfa_symbolizer_t *s, const struct run *run, uint32_t want_flags)
{
	const tfa_sym_module_t *mod = &run->map->mods[run->module];

	for (int k = 0; k < TFA_SYMFIX_SITES; k++) {
		const struct tfa_symfix_site *site = &run->r.site[k];
		const tfa_sym_frame_t *f;
		size_t n;

		ck_assert_int_eq(tfa_symbolize(s, site->ret, &f, &n), 0);
		ck_assert_int_eq((int)n, site->depth);
		for (size_t i = 0; i < n; i++) {
			ck_assert_uint_eq(f[i].pc, site->ret);
			ck_assert_str_eq(f[i].module, mod->path);
			ck_assert_uint_eq(f[i].module_offset, site->ret - mod->bias);
			ck_assert_ptr_nonnull(f[i].function);
			ck_assert_str_eq(f[i].function, site_functions[k][i]);
			ck_assert_ptr_nonnull(f[i].file);
			ck_assert_str_eq(base_name(f[i].file), site_files[k]);
			ck_assert_msg(f[i].file[0] == '/', "not absolute: %s", f[i].file);
			ck_assert_int_eq((int)f[i].line, site->line[i]);
			ck_assert_uint_gt(f[i].column, 0);
			ck_assert_uint_eq(f[i].flags,
			                  want_flags | (i + 1 < n ? TFA_SYM_INLINED : 0));
		}
		/* the real function's symbol: the return address is past its start */
		ck_assert_uint_gt(f[n - 1].symbol_offset, 0);
		ck_assert_uint_lt(f[n - 1].symbol_offset, 256);
	}
}

/* The frames of every call site when only symbols are known: one frame, the real function. */
static void
check_sites_symbols_only(tfa_symbolizer_t *s, const struct run *run)
{
	const tfa_sym_module_t *mod = &run->map->mods[run->module];

	for (int k = 0; k < TFA_SYMFIX_SITES; k++) {
		const struct tfa_symfix_site *site = &run->r.site[k];
		const tfa_sym_frame_t *f;
		size_t n;

		ck_assert_int_eq(tfa_symbolize(s, site->ret, &f, &n), 0);
		ck_assert_uint_eq(n, 1);
		ck_assert_str_eq(f[0].module, mod->path);
		ck_assert_uint_eq(f[0].module_offset, site->ret - mod->bias);
		ck_assert_ptr_nonnull(f[0].function);
		ck_assert_str_eq(f[0].function, site_functions[k][site->depth - 1]);
		ck_assert_ptr_null(f[0].file);
		ck_assert_uint_eq(f[0].line, 0);
		ck_assert_uint_eq(f[0].column, 0);
		ck_assert_uint_eq(f[0].flags, 0);
		ck_assert_uint_gt(f[0].symbol_offset, 0);
		ck_assert_uint_lt(f[0].symbol_offset, 256);
	}
}

/* Only module and offset: the file is missing or not the one the process mapped. */
static void
check_sites_module_only(tfa_symbolizer_t *s, const struct run *run, uint32_t want_flags)
{
	const tfa_sym_module_t *mod = &run->map->mods[run->module];

	for (int k = 0; k < TFA_SYMFIX_SITES; k++) {
		const struct tfa_symfix_site *site = &run->r.site[k];
		const tfa_sym_frame_t *f;
		size_t n;

		ck_assert_int_eq(tfa_symbolize(s, site->ret, &f, &n), 0);
		ck_assert_uint_eq(n, 1);
		ck_assert_uint_eq(f[0].pc, site->ret);
		ck_assert_str_eq(f[0].module, mod->path);
		ck_assert_uint_eq(f[0].module_offset, site->ret - mod->bias);
		ck_assert_ptr_null(f[0].function);
		ck_assert_ptr_null(f[0].file);
		ck_assert_uint_eq(f[0].line, 0);
		ck_assert_uint_eq(f[0].symbol_offset, 0);
		ck_assert_uint_eq(f[0].flags, want_flags);
	}
}

static void
copy_file(const char *from, const char *to)
{
	char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out;
	ssize_t n;

	ck_assert_msg(in >= 0, "%s: %s", from, strerror(errno));
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	ck_assert_msg(out >= 0, "%s: %s", to, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(n, 0);
	close(in);
	ck_assert_int_eq(close(out), 0);
}

/* A fresh directory for one test, next to the fixtures. */
static void
make_tmpdir(char *dir, size_t len)
{
	snprintf(dir, len, "%s/tmp.XXXXXX", TFA_SYMFIX_DIR);
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

/*
 * Puts a copy of the fixture's separate debug file where a debuginfo path
 * entry DIR finds it by the build id of module mod: DIR/.build-id/xx/rest.debug.
 */
static void
install_debug_by_build_id(const char *dir, const tfa_sym_module_t *mod)
{
	char hex[2 * BUILD_ID_MAX + 1], path[PATH_MAX];

	ck_assert_uint_ge(mod->build_id_len, 2);
	for (size_t i = 0; i < mod->build_id_len; i++)
		snprintf(hex + 2 * i, 3, "%02x", mod->build_id[i]);
	snprintf(path, sizeof(path), "%s/.build-id", dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s", dir, hex);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", dir, hex, hex + 2);
	copy_file(FIX_DEBUG, path);
}

static void
remove_tree(const char *dir)
{
	char cmd[PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* ---- the oracle: libdw's dwarf_getscopes, as eu-addr2line -i --------------------------------- */

struct oracle_frame {
	char function[4096];
	char file[PATH_MAX];
	int line;
};

static void
oracle_name(Dwarf_Die *die, char *out, size_t outlen)
{
	Dwarf_Attribute attr;
	const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
	char *d;

	if (name == NULL)
		name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
	if (name == NULL)
		name = dwarf_diename(die);
	d = tfa_demangle(name);
	snprintf(out, outlen, "%s", d != NULL ? d : name != NULL ? name : "");
	free(d);
}

/*
 * The frames of addr by the slow, obvious way.  Returns their number, 0 when
 * DWARF has no function at addr (only the line table's row is then filled,
 * in out[0]).
 */
static int
oracle(Dwfl_Module *mod, uint64_t addr, struct oracle_frame *out, int max)
{
	Dwarf_Addr bias = 0;
	Dwarf_Die *cudie = dwfl_module_addrdie(mod, addr, &bias);
	Dwarf_Die *scopes = NULL, *chain = NULL;
	Dwfl_Line *ln = dwfl_module_getsrc(mod, addr);
	int nchain = 0, nf = 0, last_inline = -1;

	memset(&out[0], 0, sizeof(out[0]));
	if (ln != NULL) {
		const char *src = dwfl_lineinfo(ln, NULL, &out[0].line, NULL, NULL, NULL);

		snprintf(out[0].file, sizeof(out[0].file), "%s", src != NULL ? src : "");
	}
	if (cudie != NULL && dwarf_getscopes(cudie, addr - bias, &scopes) > 0)
		nchain = dwarf_getscopes_die(&scopes[0], &chain);
	free(scopes);
	for (int i = 0; i < nchain && nf < max; i++) {
		Dwarf_Die *die = &chain[i];
		int tag = dwarf_tag(die);
		Dwarf_Attribute attr;
		Dwarf_Word v;

		if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram
		    && tag != DW_TAG_entry_point)
			continue;
		if (nf > 0) {
			Dwarf_Die *callee = &chain[last_inline];
			Dwarf_Files *files;
			Dwarf_Die cu;

			memset(&out[nf], 0, sizeof(out[nf]));
			if (dwarf_formudata(dwarf_attr(callee, DW_AT_call_line, &attr), &v) == 0)
				out[nf].line = (int)v;
			if (dwarf_formudata(dwarf_attr(callee, DW_AT_call_file, &attr), &v) == 0
			    && dwarf_diecu(callee, &cu, NULL, NULL) != NULL
			    && dwarf_getsrcfiles(&cu, &files, NULL) == 0) {
				const char *src = dwarf_filesrc(files, v, NULL, NULL);

				snprintf(out[nf].file, sizeof(out[nf].file), "%s",
				         src != NULL ? src : "");
			}
		}
		oracle_name(die, out[nf].function, sizeof(out[nf].function));
		nf++;
		if (tag != DW_TAG_inlined_subroutine)
			break;
		last_inline = i;
	}
	free(chain);
	return nf;
}

struct oracle_session {
	Dwfl *dwfl;
	Dwfl_Callbacks cb;
	char *debuginfo_path;
	Dwfl_Module *mods[MAP_MAX];
};

static void
oracle_begin(struct oracle_session *o, const struct map *map)
{
	memset(o, 0, sizeof(*o));
	o->cb.find_elf = dwfl_build_id_find_elf;
	o->cb.find_debuginfo = dwfl_standard_find_debuginfo;
	o->cb.section_address = dwfl_offline_section_address;
	o->cb.debuginfo_path = &o->debuginfo_path;
	o->dwfl = dwfl_begin(&o->cb);
	REQUIRE(o->dwfl != NULL);
	dwfl_report_begin(o->dwfl);
	for (size_t i = 0; i < map->n; i++) {
		if (map->mods[i].path[0] == '/')
			o->mods[i] = dwfl_report_elf(o->dwfl, map->mods[i].path, map->mods[i].path,
			                             -1, map->mods[i].bias, true);
	}
	REQUIRE(dwfl_report_end(o->dwfl, NULL, NULL) == 0);
}

/*
 * Whether the symbolizer's name of a function is the oracle's.  Where DWARF
 * has only a short DW_AT_name (C++ functions of internal linkage, lambdas)
 * the symbolizer takes the symbol table's demangled name of the same
 * function: "ioctl_table_fill()" for "ioctl_table_fill", "f()::{lambda()#1}::
 * operator()() const" for "operator()".
 */
static bool
same_function(const char *got, const char *want)
{
	size_t n = strlen(want);
	const char *p;

	if (strcmp(got, want) == 0 || (strncmp(got, want, n) == 0 && got[n] == '('))
		return true;
	for (p = strstr(got, want); p != NULL; p = strstr(p + 1, want)) {
		if (p - got >= 2 && p[-1] == ':' && p[-2] == ':' && p[n] == '(')
			return true;
	}
	return false;
}

/*
 * Compares the symbolizer's frames of addr in module i with the oracle's.
 * Returns false (and prints why) on a difference.
 */
static bool
oracle_agrees(tfa_symbolizer_t *s, struct oracle_session *o, size_t i, uint64_t addr)
{
	struct oracle_frame want[64];
	const tfa_sym_frame_t *f;
	size_t n;
	int nw;

	if (o->mods[i] == NULL)
		return true;
	nw = oracle(o->mods[i], addr, want, TFA_ARRAY_SIZE(want));
	REQUIRE(tfa_symbolize_addr(s, addr, &f, &n) == 0);
	if (nw == 0) {
		/* no DWARF function: one frame, the line table's row */
		if (n != 1 || (int)f[0].line != want[0].line) {
			fprintf(stderr,
			        "%s+%#" PRIx64 ": %zu frames, line %u; oracle: none, line %d\n",
			        f[0].module, f[0].module_offset, n, f[0].line, want[0].line);
			return false;
		}
		return true;
	}
	if ((int)n != nw) {
		fprintf(stderr, "%s+%#" PRIx64 ": %zu frames, oracle %d (innermost %s / %s)\n",
		        f[0].module, f[0].module_offset, n, nw, f[0].function ? f[0].function : "?",
		        want[0].function);
		return false;
	}
	for (int k = 0; k < nw; k++) {
		const char *fn = f[k].function != NULL ? f[k].function : "";

		if (f[k].file != NULL && f[k].file[0] == '/'
		    && (strstr(f[k].file, "/./") != NULL || strstr(f[k].file, "/../") != NULL
		        || strstr(f[k].file, "//") != NULL)) {
			fprintf(stderr, "%s+%#" PRIx64 " frame %d: not normalized: %s\n",
			        f[k].module, f[k].module_offset, k, f[k].file);
			return false;
		}

		if (want[k].function[0] != '\0' && !same_function(fn, want[k].function)) {
			fprintf(stderr, "%s+%#" PRIx64 " frame %d: function %s, oracle %s\n",
			        f[k].module, f[k].module_offset, k, fn, want[k].function);
			return false;
		}
		if ((int)f[k].line != want[k].line
		    || (want[k].line > 0
		        && (f[k].file == NULL
		            || strcmp(base_name(f[k].file), base_name(want[k].file)) != 0))) {
			fprintf(stderr, "%s+%#" PRIx64 " frame %d (%s): %s:%u, oracle %s:%d\n",
			        f[k].module, f[k].module_offset, k, fn, f[k].file ? f[k].file : "?",
			        f[k].line, want[k].file, want[k].line);
			return false;
		}
	}
	return true;
}

/* ---- tests ---------------------------------------------------------------------------------- */

START_TEST(test_symbolize_full_debug_info)
{
	struct run run;
	tfa_symbolizer_t *s;
	const tfa_sym_frame_t *f, *f2;
	size_t n, n2, cached;
	const char *why;

	run_fixture(FIX_FULL, &run);
	s = new_symbolizer(run.map, NULL);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, run.module, &why), 0);
	ck_assert_str_eq(why, "");
	check_sites_with_lines(s, &run, 0);

	/* cached: the same answer, the same pointers */
	cached = tfa_symbolizer_cached(s);
	ck_assert_uint_eq(cached, TFA_SYMFIX_SITES);
	ck_assert_int_eq(tfa_symbolize(s, run.r.site[TFA_SYMFIX_INLINED].ret, &f, &n), 0);
	ck_assert_int_eq(tfa_symbolize(s, run.r.site[TFA_SYMFIX_INLINED].ret, &f2, &n2), 0);
	ck_assert_ptr_eq(f, f2);
	ck_assert_uint_eq(n, n2);
	ck_assert_uint_eq(tfa_symbolizer_cached(s), cached);
	/* interned: one pointer per distinct string */
	ck_assert_ptr_eq(f[0].file, f[1].file);
	ck_assert_ptr_eq(f[0].module, f[2].module);

	/* an exact address (a function's entry), not a return address */
	ck_assert_int_eq(tfa_symbolize_addr(s, run.r.direct_entry, &f, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(f[0].function, "tfa_symfix_direct");
	ck_assert_str_eq(base_name(f[0].file), "symbolize_fixture.c");
	ck_assert_uint_eq(f[0].symbol_offset, 0);
	ck_assert_uint_eq(f[0].pc, run.r.direct_entry);
	/* the same address as a return address is the end of the function before it */
	ck_assert_int_eq(tfa_symbolize(s, run.r.direct_entry, &f2, &n2), 0);
	ck_assert_ptr_ne(f, f2);
	ck_assert_uint_eq(tfa_symbolizer_cached(s), cached + 2);

	tfa_symbolizer_free(s);
	free(run.map);
}
END_TEST

START_TEST(test_symbolize_debuglink)
{
	struct run run;
	tfa_symbolizer_t *s;

	/* stripped (objcopy --strip-debug), its DWARF in a .debug file named by .gnu_debuglink */
	run_fixture(FIX_DL, &run);
	s = new_symbolizer(run.map, NULL);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, run.module, NULL), 0);
	check_sites_with_lines(s, &run, 0);
	tfa_symbolizer_free(s);
	free(run.map);
}
END_TEST

START_TEST(test_symbolize_symbols_only)
{
	static const char *const libs[] = { FIX_SYMONLY, FIX_DYNSYM };
	struct run run;
	tfa_symbolizer_t *s;

	/* objcopy --strip-debug without a debuglink (.symtab), and strip --strip-all (.dynsym) */
	for (size_t i = 0; i < TFA_ARRAY_SIZE(libs); i++) {
		run_fixture(libs[i], &run);
		s = new_symbolizer(run.map, NULL);
		check_sites_symbols_only(s, &run);
		tfa_symbolizer_free(s);
		free(run.map);
	}
}
END_TEST

START_TEST(test_symbolize_no_module)
{
	struct map *map = map_read();
	tfa_symbolizer_t *s = new_symbolizer(map, NULL);
	void *anon = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	const uint64_t pcs[] = { 0, 1, 0x10, (uintptr_t)anon + 16, UINT64_MAX };
	const tfa_sym_frame_t *f;
	size_t n;

	ck_assert_ptr_ne(anon, MAP_FAILED);
	for (size_t i = 0; i < TFA_ARRAY_SIZE(pcs); i++) {
		ck_assert_int_eq(tfa_symbolize(s, pcs[i], &f, &n), 0);
		ck_assert_uint_eq(n, 1);
		ck_assert_uint_eq(f[0].pc, pcs[i]);
		ck_assert_uint_eq(f[0].flags, TFA_SYM_NO_MODULE);
		ck_assert_ptr_null(f[0].module);
		ck_assert_ptr_null(f[0].function);
		ck_assert_ptr_null(f[0].file);
		ck_assert_uint_eq(f[0].line, 0);
		ck_assert_uint_eq(f[0].module_offset, 0);
	}
	munmap(anon, 4096);
	tfa_symbolizer_free(s);
	free(map);
}
END_TEST

START_TEST(test_symbolize_missing_file)
{
	char dir[PATH_MAX / 2], lib[PATH_MAX], dbg[PATH_MAX];
	struct run run;
	tfa_symbolizer_t *s;
	const char *why;

	make_tmpdir(dir, sizeof(dir));
	snprintf(lib, sizeof(lib), "%s/libgone.so", dir);
	copy_file(FIX_FULL, lib);
	run_fixture(lib, &run);
	ck_assert_int_eq(unlink(lib), 0);

	s = new_symbolizer(run.map, NULL);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, run.module, &why), TFA_SYM_NO_FILE);
	ck_assert_ptr_nonnull(strstr(why, "No such file"));
	check_sites_module_only(s, &run, TFA_SYM_NO_FILE);
	tfa_symbolizer_free(s);

	/* its debug file, found by the recorded build id, still knows everything */
	snprintf(dbg, sizeof(dbg), "%s/debug", dir);
	ck_assert_int_eq(mkdir(dbg, 0700), 0);
	install_debug_by_build_id(dbg, &run.map->mods[run.module]);
	s = new_symbolizer(run.map, dbg);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, run.module, &why),
	                  TFA_SYM_DEBUG_BY_BUILD_ID);
	ck_assert_ptr_nonnull(strstr(why, "/.build-id/"));
	check_sites_with_lines(s, &run, TFA_SYM_DEBUG_BY_BUILD_ID);
	tfa_symbolizer_free(s);

	remove_tree(dir);
	free(run.map);
}
END_TEST

START_TEST(test_symbolize_replaced_file)
{
	char dir[PATH_MAX / 2], lib[PATH_MAX], dbg[PATH_MAX];
	struct run run;
	tfa_symbolizer_t *s;
	const char *why;

	make_tmpdir(dir, sizeof(dir));
	snprintf(lib, sizeof(lib), "%s/libreplaced.so", dir);
	copy_file(FIX_FULL, lib);
	run_fixture(lib, &run);
	/* rebuilt since the run: the same code, debug info and path, another build id */
	copy_file(FIX_OTHER_ID, lib);

	s = new_symbolizer(run.map, NULL);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, run.module, &why),
	                  TFA_SYM_BUILD_ID_MISMATCH);
	ck_assert_ptr_nonnull(strstr(why, "build id"));
	check_sites_module_only(s, &run, TFA_SYM_BUILD_ID_MISMATCH);
	tfa_symbolizer_free(s);

	snprintf(dbg, sizeof(dbg), "%s/debug", dir);
	ck_assert_int_eq(mkdir(dbg, 0700), 0);
	install_debug_by_build_id(dbg, &run.map->mods[run.module]);
	s = new_symbolizer(run.map, dbg);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, run.module, NULL),
	                  TFA_SYM_DEBUG_BY_BUILD_ID);
	check_sites_with_lines(s, &run, TFA_SYM_DEBUG_BY_BUILD_ID);
	tfa_symbolizer_free(s);

	/* no build id recorded: the file is taken as it is */
	run.map->mods[run.module].build_id = NULL;
	run.map->mods[run.module].build_id_len = 0;
	s = new_symbolizer(run.map, NULL);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, run.module, NULL), 0);
	tfa_symbolizer_free(s);

	remove_tree(dir);
	free(run.map);
}
END_TEST

START_TEST(test_symbolize_overlapping_modules)
{
	struct run run;
	tfa_symbolizer_t *s;
	tfa_sym_module_t mods[2];
	const tfa_sym_frame_t *f;
	size_t n;
	char err[128];

	run_fixture(FIX_FULL, &run);
	/* a library unloaded, another mapped at the same place later: the later one wins */
	mods[0] = run.map->mods[run.module];
	mods[1] = mods[0];
	mods[1].path = TFA_SYMFIX_DIR "/no-such-library.so";
	s = tfa_symbolizer_new(mods, 2, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(tfa_symbolize(s, run.r.site[TFA_SYMFIX_DIRECT].ret, &f, &n), 0);
	ck_assert_str_eq(f[0].module, mods[1].path);
	ck_assert_uint_eq(f[0].flags, TFA_SYM_NO_FILE);
	tfa_symbolizer_free(s);

	mods[1] = run.map->mods[run.module];
	mods[0].path = TFA_SYMFIX_DIR "/no-such-library.so";
	s = tfa_symbolizer_new(mods, 2, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(tfa_symbolize(s, run.r.site[TFA_SYMFIX_DIRECT].ret, &f, &n), 0);
	ck_assert_str_eq(f[0].function, "tfa_symfix_direct");
	/* the same library twice (unloaded, loaded again at the same place): one module */
	tfa_symbolizer_free(s);
	mods[0] = run.map->mods[run.module];
	mods[1] = mods[0];
	s = tfa_symbolizer_new(mods, 2, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, 0, NULL), 0);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, 1, NULL), 0);
	check_sites_with_lines(s, &run, 0);
	/* ... or with another build id the second time: the file is only the first one's */
	tfa_symbolizer_free(s);
	mods[1].build_id = (const uint8_t *)"0123456789abcdefghij";
	mods[1].build_id_len = 20;
	s = tfa_symbolizer_new(mods, 2, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, 0, NULL), 0);
	ck_assert_uint_eq(tfa_symbolizer_module_state(s, 1, NULL), TFA_SYM_BUILD_ID_MISMATCH);
	check_sites_module_only(s, &run, TFA_SYM_BUILD_ID_MISMATCH);
	tfa_symbolizer_free(s);
	mods[0] = mods[1];
	mods[1] = run.map->mods[run.module];
	s = tfa_symbolizer_new(mods, 2, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	check_sites_with_lines(s, &run, 0);

	/* no range recorded: the one of the file */
	tfa_symbolizer_free(s);
	mods[0] = run.map->mods[run.module];
	mods[0].start = mods[0].end = 0;
	s = tfa_symbolizer_new(mods, 1, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(tfa_symbolize(s, run.r.site[TFA_SYMFIX_DIRECT].ret, &f, &n), 0);
	ck_assert_str_eq(f[0].function, "tfa_symfix_direct");
	tfa_symbolizer_free(s);

	/* an empty map, and a module with no path ([vdso]) */
	s = tfa_symbolizer_new(NULL, 0, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(tfa_symbolize(s, 0x1000, &f, &n), 0);
	ck_assert_uint_eq(f[0].flags, TFA_SYM_NO_MODULE);
	tfa_symbolizer_free(s);
	mods[0] =
	        (tfa_sym_module_t){ .path = NULL, .bias = 0x1000, .start = 0x1000, .end = 0x3000 };
	s = tfa_symbolizer_new(mods, 1, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(tfa_symbolize(s, 0x1234, &f, &n), 0);
	ck_assert_uint_eq(f[0].flags, TFA_SYM_NO_FILE);
	ck_assert_str_eq(f[0].module, "");
	ck_assert_uint_eq(f[0].module_offset, 0x234);
	tfa_symbolizer_free(s);
	free(run.map);
}
END_TEST

static __attribute__((noinline, noclone)) int
test_local_function(int x)
{
	return x * 3 + 1;
}

START_TEST(test_symbolize_main_program)
{
	struct map *map = map_read();
	tfa_symbolizer_t *s = new_symbolizer(map, NULL);
	int (*volatile fn)(int) = test_local_function;
	const tfa_sym_frame_t *f;
	size_t n;

	/* this program (PIE), its own code: the entry of a static function */
	ck_assert_int_eq(fn(1), 4);
	ck_assert_int_eq(tfa_symbolize_addr(s, (uintptr_t)fn, &f, &n), 0);
	ck_assert_ptr_nonnull(f[n - 1].function);
	ck_assert_str_eq(f[n - 1].function, "test_local_function");
	ck_assert_str_eq(f[n - 1].module, map->mods[0].path);
	ck_assert_ptr_nonnull(f[0].file);
	ck_assert_str_eq(base_name(f[0].file), "check_symbolize.c");
	tfa_symbolizer_free(s);
	free(map);
}
END_TEST

START_TEST(test_symbolize_agrees_with_libdw)
{
	struct run run;
	struct oracle_session o;
	tfa_symbolizer_t *s;
	size_t checked = 0, bad = 0;

	/* every byte of the fixture's code, and libc at a stride when it has debug info */
	run_fixture(FIX_FULL, &run);
	s = new_symbolizer(run.map, NULL);
	oracle_begin(&o, run.map);
	for (size_t i = 0; i < run.map->nsegs; i++) {
		const struct map_segment *g = &run.map->segs[i];
		const char *path = run.map->mods[g->module].path;
		uint64_t stride = g->module == run.module ? 1 : strstr(path, "/libc.so") ? 509 : 0;

		for (uint64_t a = g->lo; stride != 0 && a < g->hi; a += stride, checked++)
			bad += !oracle_agrees(s, &o, g->module, a);
	}
	ck_assert_uint_gt(checked, 1000);
	ck_assert_uint_eq(bad, 0);
	dwfl_end(o.dwfl);
	tfa_symbolizer_free(s);
	free(run.map);
}
END_TEST

START_TEST(test_demangle)
{
	char *d;

	d = tfa_demangle("_ZN3tfa9allocator8allocateEmm");
	ck_assert_str_eq(d, "tfa::allocator::allocate(unsigned long, unsigned long)");
	free(d);
	d = tfa_demangle("_ZNSt6vectorIiSaIiEE9push_backERKi");
	ck_assert_str_eq(d, "std::vector<int, std::allocator<int> >::push_back(int const&)");
	free(d);
	ck_assert_ptr_null(tfa_demangle("main"));
	ck_assert_ptr_null(tfa_demangle("_Z"));
	ck_assert_ptr_null(tfa_demangle("_Znotmangled!"));
	ck_assert_ptr_null(tfa_demangle(""));
	ck_assert_ptr_null(tfa_demangle(NULL));
}
END_TEST

static Suite *
symbolize_suite(void)
{
	Suite *s = suite_create("symbolize");
	TCase *tc;

	tc = tcase_create("fixture");
	tcase_add_test(tc, test_symbolize_full_debug_info);
	tcase_add_test(tc, test_symbolize_debuglink);
	tcase_add_test(tc, test_symbolize_symbols_only);
	tcase_add_test(tc, test_symbolize_main_program);
	suite_add_tcase(s, tc);

	tc = tcase_create("missing");
	tcase_add_test(tc, test_symbolize_no_module);
	tcase_add_test(tc, test_symbolize_missing_file);
	tcase_add_test(tc, test_symbolize_replaced_file);
	tcase_add_test(tc, test_symbolize_overlapping_modules);
	suite_add_tcase(s, tc);

	tc = tcase_create("oracle");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_symbolize_agrees_with_libdw);
	tcase_add_test(tc, test_demangle);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- not tests: timing, and a wide comparison with the oracle -------------------------------- */

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The addresses of every stride-th byte of every module's code (of modules matching only). */
static uint64_t *
code_addresses(const struct map *map, uint64_t stride, const char *only, size_t *count)
{
	uint64_t *a = NULL;
	size_t n = 0, cap = 0;

	for (size_t i = 0; i < map->nsegs; i++) {
		const struct map_segment *g = &map->segs[i];

		if (only != NULL && strstr(map->mods[g->module].path, only) == NULL)
			continue;
		for (uint64_t x = g->lo; x < g->hi; x += stride) {
			if (n == cap) {
				cap = cap == 0 ? 4096 : cap * 2;
				a = realloc(a, cap * sizeof(*a));
				if (a == NULL)
					abort();
			}
			a[n++] = x;
		}
	}
	*count = n;
	return a;
}

static int
bench(uint64_t stride, const char *only)
{
	struct map *map = calloc(1, sizeof(*map));
	size_t n, frames = 0, lines = 0, named = 0;
	uint64_t *pcs, seed = 42;
	tfa_symbolizer_t *s;
	double t0, t1, t2, t3;
	char err[256];

	dl_iterate_phdr(map_add, map);
	pcs = code_addresses(map, stride, only, &n);
	/* random order: stacks visit modules and CUs in no order */
	for (size_t i = n; i > 1; i--) {
		size_t j;
		uint64_t t;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		j = (size_t)((seed >> 33) % i);
		t = pcs[i - 1];
		pcs[i - 1] = pcs[j];
		pcs[j] = t;
	}
	t0 = now();
	s = tfa_symbolizer_new(map->mods, map->n, NULL, err, sizeof(err));
	if (s == NULL) {
		fprintf(stderr, "check_symbolize: %s\n", err);
		return 1;
	}
	t1 = now();
	for (size_t i = 0; i < n; i++) {
		const tfa_sym_frame_t *f;
		size_t nf;

		if (tfa_symbolize(s, pcs[i], &f, &nf) != 0)
			return 1;
		frames += nf;
		lines += f[0].line != 0;
		named += f[nf - 1].function != NULL;
	}
	t2 = now();
	for (size_t i = 0; i < n; i++) {
		const tfa_sym_frame_t *f;
		size_t nf;

		if (tfa_symbolize(s, pcs[i], &f, &nf) != 0)
			return 1;
	}
	t3 = now();
	printf("modules: %zu; addresses: %zu (every %" PRIu64 " bytes of code%s%s), random order\n",
	       map->n, n, stride, only != NULL ? " of " : "", only != NULL ? only : "");
	for (size_t i = 0; i < map->n; i++) {
		const char *why;
		uint32_t fl = tfa_symbolizer_module_state(s, i, &why);

		if (fl != 0)
			printf("  module %s: %s\n", map->mods[i].path, why);
	}
	printf("new: %.3f s; first pass: %.3f s, %.2f us/address; cached pass: %.3f s\n", t1 - t0,
	       t2 - t1, (t2 - t1) * 1e6 / (double)(n ? n : 1), t3 - t2);
	printf("frames: %zu (%.2f/address); with a line: %.1f%%; with a function: %.1f%%\n", frames,
	       (double)frames / (double)(n ? n : 1), 100.0 * (double)lines / (double)(n ? n : 1),
	       100.0 * (double)named / (double)(n ? n : 1));
	tfa_symbolizer_free(s);
	free(pcs);
	free(map);
	return 0;
}

static int
compare(uint64_t stride, const char *only)
{
	struct map *map = calloc(1, sizeof(*map));
	struct oracle_session o;
	tfa_symbolizer_t *s;
	size_t bad = 0, checked = 0;
	char err[256];

	dl_iterate_phdr(map_add, map);
	s = tfa_symbolizer_new(map->mods, map->n, NULL, err, sizeof(err));
	if (s == NULL) {
		fprintf(stderr, "check_symbolize: %s\n", err);
		return 1;
	}
	oracle_begin(&o, map);
	for (size_t i = 0; i < map->nsegs; i++) {
		const struct map_segment *g = &map->segs[i];

		if (only != NULL && strstr(map->mods[g->module].path, only) == NULL)
			continue;
		for (uint64_t a = g->lo; a < g->hi; a += stride, checked++)
			bad += !oracle_agrees(s, &o, g->module, a);
	}
	printf("%zu addresses, %zu differ from dwarf_getscopes\n", checked, bad);
	dwfl_end(o.dwfl);
	tfa_symbolizer_free(s);
	free(map);
	return bad != 0;
}

int
main(int argc, char **argv)
{
	SRunner *sr;
	int failures;

	/* never ask debuginfod servers: the tests are about local files */
	unsetenv("DEBUGINFOD_URLS");
	if (argc >= 2 && (strcmp(argv[1], "--bench") == 0 || strcmp(argv[1], "--compare") == 0)) {
		outside_check = true;
		uint64_t stride = argc >= 3 ? strtoull(argv[2], NULL, 0) : 16;
		const char *only = argc >= 4 ? argv[3] : NULL;

		if (stride == 0)
			stride = 1;
		return strcmp(argv[1], "--bench") == 0 ? bench(stride, only)
		                                       : compare(stride, only);
	}
	sr = srunner_create(symbolize_suite());
	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
