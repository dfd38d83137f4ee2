/* SPDX-License-Identifier: MIT */
/*
 * The symbolizer (tools/symbolize.h) over elfutils' libdwfl.
 *
 * Layout: the modules sorted by start, with the running maximum of their
 * ends, for a binary search that also copes with overlapping ranges; a hash
 * table from address to answer; answers and strings in an arena that only
 * grows, so that every pointer handed out stays valid until the end; an
 * intern table of strings, which also caches each mangled name's demangling.
 *
 * How one address becomes frames (what eu-addr2line -i computes):
 *   - the line table row of the address (dwfl_module_getsrc) gives the file,
 *     line and column of the innermost frame;
 *   - the innermost function DIE containing the address, and the function
 *     DIEs around it: eu-addr2line asks dwarf_getscopes and
 *     dwarf_getscopes_die, which walk the CU's DIE tree at every address
 *     (300 us an address in libc); here one walk of each CU builds an index
 *     (struct sym_cu) that answers by binary search (3 us an address);
 *   - each DW_TAG_inlined_subroutine on the way out is one inlined call: its
 *     DW_AT_call_file, DW_AT_call_line and DW_AT_call_column locate the call
 *     in the next function out, and its abstract origin names the function
 *     (DW_AT_linkage_name demangled, else DW_AT_name);
 *   - the symbol table names the function where DWARF does not, and where
 *     DWARF has only a short name for it (C++ functions of internal linkage,
 *     lambdas); libdwfl's dwfl_module_addrinfo scans the whole symbol table
 *     at every call, so a sorted copy (struct sym_symbol) answers instead.
 */
#include "tools/symbolize.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * libstdc++'s demangler, declared extern "C" in <cxxabi.h> as
 * abi::__cxa_demangle: C code can call it, linked with -lstdc++.
 */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* Frames of one address at most: deeper inline chains are cut (outermost frames dropped). */
#define SYM_MAX_FRAMES             64
/* Size of the arena's chunks (larger requests get a chunk of their own). */
#define SYM_CHUNK                  ((size_t)64 << 10)
/* libdwfl's own default debuginfo path (DEFAULT_DEBUGINFO_PATH in libdwfl). */
#define SYM_DEFAULT_DEBUGINFO_PATH ":.debug:/usr/lib/debug"
/* Longest path the symbolizer builds (comp_dir joined with a relative source name, ...). */
#define SYM_PATH_MAX               4096
/* Longest build id the messages spell out. */
#define SYM_BUILD_ID_MAX           64

struct sym_chunk {
	struct sym_chunk *next;
	size_t used, cap;
	max_align_t data[];
};

/* An interned string. */
struct sym_str {
	const char *
	        demangled; /* function names: the demangled form (or str); set with demangle_done */
	uint64_t hash;
	size_t len;
	bool demangle_done;
	char str[];
};

/* One answer of the cache: an empty slot has nframes == 0. */
struct sym_entry {
	uint64_t pc; /* the address asked about */
	const tfa_sym_frame_t *frames;
	uint32_t nframes;
	bool ret; /* asked as a return address */
};

/*
 * One function symbol of a module's symbol table (.symtab, else .dynsym, as
 * libdwfl finds them).  libdwfl's own dwfl_module_addrinfo scans the whole
 * table at every call: this sorted copy answers in O(log n).
 */
struct sym_symbol {
	uint64_t addr, size;  /* absolute (bias applied); size 0: unknown */
	const char *raw;      /* the symbol's name in libelf's string table */
	const char *function; /* its interned, demangled form; NULL until asked */
	unsigned rank;        /* which of several symbols at one address names it: higher wins */
};

/*
 * A node of a CU's index: one DIE of a function, out of line
 * (DW_TAG_subprogram, DW_TAG_entry_point) or inlined
 * (DW_TAG_inlined_subroutine), with what the frames need from it, looked up
 * once.
 */
struct sym_node {
	Dwarf_Die die;
	int32_t parent; /* the node of the function around it; -1: none */
	bool inlined;
	bool named, sited; /* function / the call site were looked up */
	bool mangled;      /* function came from a (C++) linkage name */
	const char *function;
	const char *call_file; /* inlined: where the call is, in the parent's function */
	uint32_t call_line, call_column;
};

/* A piece of a CU's code: [lo, hi) (DWARF addresses, without the bias) lies in node. */
struct sym_seg {
	uint64_t lo, hi;
	int32_t node;
};

/*
 * The index of one CU, made the first time an address falls in it: one walk
 * of its DIE tree collects the function DIEs and their address ranges, which
 * are then flattened into disjoint segments, each naming the innermost
 * function DIE there.  One binary search then replaces dwarf_getscopes and
 * dwarf_getscopes_die, which walk the CU's DIE tree at every address.
 */
struct sym_cu {
	Dwarf_Off off; /* of the CU DIE */
	struct sym_node *nodes;
	size_t nnodes;
	struct sym_seg *segs;
	size_t nsegs;
};

struct sym_module {
	const char *path; /* interned; "" when the map gave none */
	uint64_t bias, start, end;
	const uint8_t *build_id; /* in the arena; NULL when none recorded */
	size_t build_id_len;
	struct sym_module *canon; /* whose file and indices serve this module: itself, or an
	                           * earlier entry of the map with the same path, bias and build id */
	Dwfl_Module *dm;          /* NULL: nothing can be read for this module */
	uint32_t flags;  /* TFA_SYM_NO_FILE, TFA_SYM_BUILD_ID_MISMATCH, TFA_SYM_DEBUG_BY_BUILD_ID */
	const char *why; /* interned; "" */

	/* The function symbols, by address: built at the first address in the module. */
	bool syms_done;
	struct sym_symbol *syms;
	size_t nsyms;

	/* The CUs indexed so far: open addressing by CU offset. */
	struct sym_cu **cus;
	size_t ncus, cus_cap;
};

struct tfa_symbolizer_s {
	Dwfl *dwfl;
	Dwfl_Callbacks callbacks; /* libdwfl keeps a pointer to it */
	char *debuginfo_path;     /* callbacks.debuginfo_path points here; NULL: the default */

	struct sym_module *mods;
	size_t nmods;
	size_t *order;    /* indices of the modules with a range, by start, then by index */
	uint64_t *maxend; /* maxend[i]: the largest end of order[0..i] */
	size_t norder;

	struct sym_entry *cache;
	size_t ncache, cache_cap;

	struct sym_str **strs;
	size_t nstrs, strs_cap;

	struct sym_chunk *chunks;
	bool oom; /* an allocation failed during the current request */
};

/* ---- errors, arena, strings --------------------------------------------------------------- */

static void __attribute__((format(printf, 3, 4)))
sym_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static void *
sym_alloc(tfa_symbolizer_t *s, size_t size)
{
	struct sym_chunk *c = s->chunks;
	void *p;

	size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	if (c == NULL || c->cap - c->used < size) {
		size_t cap = size > SYM_CHUNK ? size : SYM_CHUNK;

		c = malloc(sizeof(*c) + cap);
		if (c == NULL) {
			s->oom = true;
			return NULL;
		}
		c->next = s->chunks;
		c->used = 0;
		c->cap = cap;
		s->chunks = c;
	}
	p = (char *)c->data + c->used;
	c->used += size;
	return p;
}

/* FNV-1a, then a final mix so that the low bits index the table well. */
static uint64_t
sym_hash_bytes(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 0x100000001b3ull;
	}
	return h ^ (h >> 29);
}

static uint64_t
sym_hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static int
sym_strs_grow(tfa_symbolizer_t *s)
{
	size_t cap = s->strs_cap == 0 ? 1024 : s->strs_cap * 2;
	struct sym_str **t = calloc(cap, sizeof(*t));

	if (t == NULL) {
		s->oom = true;
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->strs_cap; i++) {
		struct sym_str *e = s->strs[i];
		size_t j;

		if (e == NULL)
			continue;
		for (j = e->hash & (cap - 1); t[j] != NULL; j = (j + 1) & (cap - 1))
			;
		t[j] = e;
	}
	free(s->strs);
	s->strs = t;
	s->strs_cap = cap;
	return 0;
}

/* The interned copy of p[0..n); NULL when out of memory. */
static struct sym_str *
sym_intern_entry(tfa_symbolizer_t *s, const char *p, size_t n)
{
	uint64_t h = sym_hash_bytes(p, n);
	struct sym_str *e;
	size_t j;

	if ((s->nstrs + 1) * 2 > s->strs_cap && sym_strs_grow(s) != 0)
		return NULL;
	for (j = h & (s->strs_cap - 1); (e = s->strs[j]) != NULL; j = (j + 1) & (s->strs_cap - 1)) {
		if (e->hash == h && e->len == n && memcmp(e->str, p, n) == 0)
			return e;
	}
	e = sym_alloc(s, sizeof(*e) + n + 1);
	if (e == NULL)
		return NULL;
	e->demangled = NULL;
	e->hash = h;
	e->len = n;
	e->demangle_done = false;
	memcpy(e->str, p, n);
	e->str[n] = '\0';
	s->strs[j] = e;
	s->nstrs++;
	return e;
}

static const char *
sym_intern(tfa_symbolizer_t *s, const char *str)
{
	struct sym_str *e = sym_intern_entry(s, str, strlen(str));

	return e != NULL ? e->str : NULL;
}

char *
tfa_demangle(const char *name)
{
	int status = -1;
	char *d;

	if (name == NULL || name[0] != '_' || name[1] != 'Z')
		return NULL;
	d = __cxa_demangle(name, NULL, NULL, &status);
	if (status != 0) {
		free(d);
		return NULL;
	}
	return d;
}

/*
 * A function's name as reports show it, interned: demangled when mangled.
 * len: the length of the raw name to take (symbol table names lose their
 * "@VERSION" suffix).
 */
static const char *
sym_function_name(tfa_symbolizer_t *s, const char *raw, size_t len)
{
	struct sym_str *e = sym_intern_entry(s, raw, len);

	if (e == NULL)
		return NULL;
	if (!e->demangle_done) {
		char *d = tfa_demangle(e->str);

		e->demangled = e->str;
		if (d != NULL) {
			struct sym_str *de = sym_intern_entry(s, d, strlen(d));

			free(d);
			if (de == NULL)
				return NULL;
			e->demangled = de->str;
		}
		e->demangle_done = true;
	}
	return e->demangled;
}

/*
 * Drops the "." and "dir/.." components of an absolute path, in place
 * (lexically: build trees are seldom at hand to resolve symbolic links, and
 * "/build/gcc/x86_64-linux-gnu/libsanitizer/../../../src/x.cpp" helps no one).
 */
static void
sym_normalize(char *path)
{
	char *out = path + 1;
	const char *in = path + 1;

	if (path[0] != '/')
		return;
	for (;;) {
		size_t len = strcspn(in, "/");
		bool last = in[len] == '\0'; /* read before out overwrites it */

		if (len == 0 || (len == 1 && in[0] == '.')) {
			/* an empty or "." component: dropped */
		} else if (len == 2 && in[0] == '.' && in[1] == '.') {
			if (out > path + 1) {
				out--; /* the '/' after the previous component */
				while (out > path + 1 && out[-1] != '/')
					out--;
			}
		} else {
			memmove(out, in, len);
			out += len;
			*out++ = '/';
		}
		if (last)
			break;
		in += len + 1;
	}
	if (out > path + 1)
		out--; /* the last '/' */
	*out = '\0';
}

/*
 * A source file's name as the line table gives it, made absolute with the
 * CU's DW_AT_comp_dir when it is relative and the directory is absolute, and
 * normalized when absolute.
 */
static const char *
sym_source_path(tfa_symbolizer_t *s, const char *name, Dwarf_Die *cu)
{
	Dwarf_Attribute attr;
	const char *dir = NULL;
	char buf[SYM_PATH_MAX];
	int n;

	if (name == NULL || name[0] == '\0')
		return NULL;
	if (name[0] != '/' && cu != NULL)
		dir = dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &attr));
	/* a relative comp_dir (-fdebug-prefix-map=DIR=.) helps nothing */
	if (dir != NULL && dir[0] == '/')
		n = snprintf(buf, sizeof(buf), "%s/%s", dir, name);
	else
		n = snprintf(buf, sizeof(buf), "%s", name);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return sym_intern(s, name);
	sym_normalize(buf);
	return sym_intern(s, buf);
}

static void
sym_hex(char *out, size_t outlen, const uint8_t *p, size_t n)
{
	size_t i;

	if (outlen == 0)
		return;
	for (i = 0; i < n && 2 * i + 2 < outlen; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
	out[2 * i] = '\0';
}

/* ---- the symbol table index ---------------------------------------------------------------- */

/* Among symbols at one address: global over weak over local, then fewer leading underscores. */
static unsigned
sym_rank(const GElf_Sym *sym, const char *name)
{
	unsigned bind = GELF_ST_BIND(sym->st_info);
	unsigned r = bind == STB_GLOBAL ? 3 : bind == STB_WEAK ? 2 : 1;
	unsigned under = 0;

	while (under < 3 && name[under] == '_')
		under++;
	return r * 4 + (3 - under);
}

static int
sym_cmp_symbol(const void *a, const void *b)
{
	const struct sym_symbol *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank > y->rank ? -1 : 1; /* the best name first */
	return x->size > y->size ? -1 : x->size < y->size;
}

/* Builds m's sorted table of function symbols (none when out of memory or no table). */
static void
sym_index_symbols(tfa_symbolizer_t *s, struct sym_module *m)
{
	int n = dwfl_module_getsymtab(m->dm);
	size_t k = 0, out = 0;

	m->syms_done = true;
	if (n <= 0)
		return;
	m->syms = malloc((size_t)n * sizeof(*m->syms));
	if (m->syms == NULL) {
		s->oom = true;
		return;
	}
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		const char *name = dwfl_module_getsym_info(m->dm, i, &sym, &addr, NULL, NULL, NULL);
		unsigned type = GELF_ST_TYPE(sym.st_info);

		if (name == NULL || name[0] == '\0' || sym.st_shndx == SHN_UNDEF || addr == 0
		    || (type != STT_FUNC && type != STT_GNU_IFUNC))
			continue;
		m->syms[k].addr = addr;
		m->syms[k].size = sym.st_size;
		m->syms[k].raw = name;
		m->syms[k].function = NULL;
		m->syms[k].rank = sym_rank(&sym, name);
		k++;
	}
	qsort(m->syms, k, sizeof(*m->syms), sym_cmp_symbol);
	/* one symbol per address: the best-ranked name, the largest size */
	for (size_t i = 0; i < k; i++) {
		if (out > 0 && m->syms[out - 1].addr == m->syms[i].addr)
			continue;
		m->syms[out++] = m->syms[i];
	}
	m->nsyms = out;
}

/* The function symbol containing addr in m; NULL: none. */
static struct sym_symbol *
sym_find_symbol(tfa_symbolizer_t *s, struct sym_module *m, uint64_t addr)
{
	size_t lo = 0, hi;

	if (!m->syms_done)
		sym_index_symbols(s, m);
	hi = m->nsyms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->syms[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	/* the nearest symbol below; when it is too small, a larger one just before it (nested) */
	for (size_t i = lo, tries = 0; i-- > 0 && tries < 8; tries++) {
		struct sym_symbol *y = &m->syms[i];

		if (y->size > 0 && addr - y->addr < y->size)
			return y;
		if (y->size == 0 && i + 1 == lo)
			return y; /* no size (hand-written assembly): the nearest one, as libdwfl does */
	}
	return NULL;
}

static const char *
sym_symbol_function(tfa_symbolizer_t *s, struct sym_symbol *y)
{
	if (y->function == NULL) {
		/* .symtab names of versioned definitions read "memcpy@@GLIBC_2.14" */
		size_t len = strcspn(y->raw + 1, "@") + 1;

		y->function = sym_function_name(s, y->raw, len);
	}
	return y->function;
}

/* ---- the CU index ----------------------------------------------------------------------------- */

/* A function DIE's address range while a CU index is built. */
struct sym_range {
	uint64_t lo, hi;
	int32_t node;
	uint32_t depth; /* in the DIE tree: an inner DIE is deeper than the DIEs around it */
};

struct sym_cu_build {
	tfa_symbolizer_t *s;
	struct sym_cu *cu;
	size_t nodes_cap;
	struct sym_range *ranges;
	size_t nranges, ranges_cap;
};

static int
sym_grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *q;

	if (need <= *cap)
		return 0;
	ncap = *cap == 0 ? 64 : *cap * 2;
	while (ncap < need)
		ncap *= 2;
	q = realloc(*p, ncap * elem);
	if (q == NULL)
		return -ENOMEM;
	*p = q;
	*cap = ncap;
	return 0;
}

/* Adds the function DIE die, inside node parent, with its ranges.  Returns its node, or -1. */
static int32_t
sym_cu_add(struct sym_cu_build *b, Dwarf_Die *die, int32_t parent, bool inlined, uint32_t depth)
{
	struct sym_cu *cu = b->cu;
	struct sym_node *node;
	Dwarf_Addr base, lo, hi;
	ptrdiff_t off = 0;
	int32_t id;

	if (cu->nnodes >= INT32_MAX
	    || sym_grow((void **)&cu->nodes, &b->nodes_cap, cu->nnodes + 1, sizeof(*cu->nodes))
	               != 0)
		return -1;
	id = (int32_t)cu->nnodes++;
	node = &cu->nodes[id];
	memset(node, 0, sizeof(*node));
	node->die = *die;
	node->parent = parent;
	node->inlined = inlined;
	while ((off = dwarf_ranges(die, off, &base, &lo, &hi)) > 0) {
		if (lo >= hi)
			continue;
		if (sym_grow((void **)&b->ranges, &b->ranges_cap, b->nranges + 1,
		             sizeof(*b->ranges))
		    != 0)
			return -1;
		b->ranges[b->nranges++] = (struct sym_range){ lo, hi, id, depth };
	}
	return id;
}

/* Whether die has code addresses (DW_AT_low_pc or DW_AT_ranges). */
static bool
sym_has_pc(Dwarf_Die *die)
{
	return dwarf_hasattr(die, DW_AT_low_pc) || dwarf_hasattr(die, DW_AT_ranges);
}

/* Walks the children of die, inside function node parent.  Returns 0 or -ENOMEM. */
static int
sym_cu_walk(struct sym_cu_build *b, Dwarf_Die *die, int32_t parent, uint32_t depth)
{
	Dwarf_Die child;

	if (depth > 256 || dwarf_child(die, &child) != 0)
		return 0;
	do {
		int32_t node = parent;
		bool descend = false;

		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram:
		case DW_TAG_entry_point:
		case DW_TAG_inlined_subroutine:
			/* declarations and abstract instances have no code, nor anything in them */
			if (!sym_has_pc(&child))
				break;
			node = sym_cu_add(b, &child, parent,
			                  dwarf_tag(&child) == DW_TAG_inlined_subroutine, depth);
			if (node < 0)
				return -ENOMEM;
			descend = true;
			break;
		case DW_TAG_lexical_block:
		case DW_TAG_try_block:
		case DW_TAG_catch_block:
		case DW_TAG_with_stmt:
		case DW_TAG_namespace:
		case DW_TAG_module:
		case DW_TAG_class_type:
		case DW_TAG_structure_type:
		case DW_TAG_union_type:
			descend = true;
			break;
		default:
			break;
		}
		if (descend && dwarf_haschildren(&child)
		    && sym_cu_walk(b, &child, node, depth + 1) != 0)
			return -ENOMEM;
	} while (dwarf_siblingof(&child, &child) == 0);
	return 0;
}

static int
sym_cmp_range(const void *a, const void *b)
{
	const struct sym_range *x = a, *y = b;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	if (x->depth != y->depth)
		return x->depth < y->depth ? -1 : 1; /* the outer one first */
	if (x->hi != y->hi)
		return x->hi > y->hi ? -1 : 1;
	/* aliases (two DIEs, one range; assembler output has them): the first DIE last, so that
	 * it wins, as with dwarf_getscopes */
	return x->node > y->node ? -1 : x->node < y->node;
}

static int
sym_cu_emit(struct sym_cu_build *b, size_t *segs_cap, uint64_t lo, uint64_t hi, int32_t node)
{
	struct sym_cu *cu = b->cu;

	if (lo >= hi)
		return 0;
	if (cu->nsegs > 0 && cu->segs[cu->nsegs - 1].hi == lo
	    && cu->segs[cu->nsegs - 1].node == node) {
		cu->segs[cu->nsegs - 1].hi = hi;
		return 0;
	}
	if (sym_grow((void **)&cu->segs, segs_cap, cu->nsegs + 1, sizeof(*cu->segs)) != 0)
		return -ENOMEM;
	cu->segs[cu->nsegs++] = (struct sym_seg){ lo, hi, node };
	return 0;
}

/*
 * Flattens the ranges into disjoint segments, each naming the innermost
 * function there: a sweep by start with a stack of the open ranges (DWARF
 * nests an inlined call's ranges inside its caller's; where it does not, the
 * later, deeper range wins).
 */
static int
sym_cu_flatten(struct sym_cu_build *b)
{
	size_t *stack, sp = 0, segs_cap = 0;
	uint64_t cur = 0;
	int rc = 0;

	if (b->nranges == 0)
		return 0;
	qsort(b->ranges, b->nranges, sizeof(*b->ranges), sym_cmp_range);
	stack = malloc((b->nranges + 1) * sizeof(*stack));
	if (stack == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < b->nranges && rc == 0; i++) {
		const struct sym_range *r = &b->ranges[i];

		while (sp > 0 && b->ranges[stack[sp - 1]].hi <= r->lo && rc == 0) {
			const struct sym_range *t = &b->ranges[stack[--sp]];

			if (cur < t->hi) {
				rc = sym_cu_emit(b, &segs_cap, cur, t->hi, t->node);
				cur = t->hi;
			}
		}
		if (sp > 0 && rc == 0)
			rc = sym_cu_emit(b, &segs_cap, cur, r->lo, b->ranges[stack[sp - 1]].node);
		if (cur < r->lo)
			cur = r->lo;
		stack[sp++] = i;
	}
	while (sp > 0 && rc == 0) {
		const struct sym_range *t = &b->ranges[stack[--sp]];

		if (cur < t->hi) {
			rc = sym_cu_emit(b, &segs_cap, cur, t->hi, t->node);
			cur = t->hi;
		}
	}
	free(stack);
	return rc;
}

static void
sym_cu_free(struct sym_cu *cu)
{
	if (cu == NULL)
		return;
	free(cu->nodes);
	free(cu->segs);
	free(cu);
}

/* The index of the CU cudie of module m, made on first use; NULL when out of memory. */
static struct sym_cu *
sym_cu_get(tfa_symbolizer_t *s, struct sym_module *m, Dwarf_Die *cudie)
{
	Dwarf_Off off = dwarf_dieoffset(cudie);
	struct sym_cu_build b;
	struct sym_cu *cu;
	size_t j;

	if ((m->ncus + 1) * 2 > m->cus_cap) {
		size_t cap = m->cus_cap == 0 ? 64 : m->cus_cap * 2;
		struct sym_cu **t = calloc(cap, sizeof(*t));

		if (t == NULL)
			goto oom;
		for (size_t i = 0; i < m->cus_cap; i++) {
			if (m->cus[i] == NULL)
				continue;
			for (j = sym_hash_u64(m->cus[i]->off) & (cap - 1); t[j] != NULL;
			     j = (j + 1) & (cap - 1))
				;
			t[j] = m->cus[i];
		}
		free(m->cus);
		m->cus = t;
		m->cus_cap = cap;
	}
	for (j = sym_hash_u64(off) & (m->cus_cap - 1); m->cus[j] != NULL;
	     j = (j + 1) & (m->cus_cap - 1)) {
		if (m->cus[j]->off == off)
			return m->cus[j];
	}

	cu = calloc(1, sizeof(*cu));
	if (cu == NULL)
		goto oom;
	cu->off = off;
	memset(&b, 0, sizeof(b));
	b.s = s;
	b.cu = cu;
	if (sym_cu_walk(&b, cudie, -1, 1) != 0 || sym_cu_flatten(&b) != 0) {
		free(b.ranges);
		sym_cu_free(cu);
		goto oom;
	}
	free(b.ranges);
	m->cus[j] = cu;
	m->ncus++;
	return cu;

oom:
	s->oom = true;
	return NULL;
}

/* The innermost function node of cu at addr (a DWARF address); -1: none. */
static int32_t
sym_cu_find(const struct sym_cu *cu, uint64_t addr)
{
	size_t lo = 0, hi = cu->nsegs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cu->segs[mid].lo <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || addr >= cu->segs[lo - 1].hi)
		return -1;
	return cu->segs[lo - 1].node;
}

/* ---- modules -------------------------------------------------------------------------------- */

enum sym_open_e {
	SYM_OPEN_OK,
	SYM_OPEN_ERRNO,    /* open failed: errno in *err */
	SYM_OPEN_NOT_ELF,  /* not an ELF file */
	SYM_OPEN_MISMATCH, /* another build id (or none) than the one recorded */
};

/*
 * Opens path and checks that it is an ELF file with the build id id[0..idlen)
 * (any when idlen is 0).  On SYM_OPEN_OK *fdp is the open descriptor.
 */
static enum sym_open_e
sym_open_elf(const char *path, const uint8_t *id, size_t idlen, int *fdp, int *err)
{
	enum sym_open_e r = SYM_OPEN_OK;
	Elf *elf;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*err = errno;
		return SYM_OPEN_ERRNO;
	}
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (elf == NULL || elf_kind(elf) != ELF_K_ELF) {
		r = SYM_OPEN_NOT_ELF;
	} else if (idlen > 0) {
		const void *bits = NULL;
		ssize_t n = dwelf_elf_gnu_build_id(elf, &bits);

		if (n != (ssize_t)idlen || memcmp(bits, id, idlen) != 0)
			r = SYM_OPEN_MISMATCH;
	}
	elf_end(elf);
	if (r != SYM_OPEN_OK) {
		close(fd);
		return r;
	}
	*fdp = fd;
	return SYM_OPEN_OK;
}

/*
 * Looks for DIR/.build-id/xx/rest.debug by the module's recorded build id in
 * each absolute directory of the debuginfo path.  Returns an open descriptor
 * and the file's path in buf, or -1.
 */
static int
sym_open_by_build_id(const tfa_symbolizer_t *s, const struct sym_module *m, char *buf,
                     size_t buflen)
{
	const char *path =
	        s->debuginfo_path != NULL ? s->debuginfo_path : SYM_DEFAULT_DEBUGINFO_PATH;
	char hex[2 * SYM_BUILD_ID_MAX + 1];

	if (m->build_id_len < 2 || m->build_id_len > SYM_BUILD_ID_MAX)
		return -1;
	sym_hex(hex, sizeof(hex), m->build_id, m->build_id_len);
	while (*path == '+' || *path == '-')
		path++;
	while (*path != '\0') {
		size_t len = strcspn(path, ":");
		int fd, err, n;

		if (path[0] == '/') {
			n = snprintf(buf, buflen, "%.*s/.build-id/%.2s/%s.debug", (int)len, path,
			             hex, hex + 2);
			if (n > 0 && (size_t)n < buflen
			    && sym_open_elf(buf, m->build_id, m->build_id_len, &fd, &err)
			               == SYM_OPEN_OK)
				return fd;
		}
		path += len;
		if (*path == ':')
			path++;
	}
	return -1;
}

/* Whether path names no file: none given, or the kernel's vDSO as the loader or maps name it. */
static bool
sym_pseudo_file(const char *path)
{
	return path[0] == '\0' || path[0] == '[' || strncmp(path, "linux-vdso.so", 13) == 0
	       || strncmp(path, "linux-gate.so", 13) == 0;
}

/*
 * Reports module m, entry i of the map, to libdwfl, from its own file or a
 * debug file found by its build id.
 */
static void
sym_report(tfa_symbolizer_t *s, struct sym_module *m, size_t i)
{
	char why[2 * SYM_PATH_MAX + 512];
	char file[SYM_PATH_MAX];
	char dwname[SYM_PATH_MAX + 32];
	const char *name = m->path[0] != '\0' ? m->path : "(no path)";
	const char *used = m->path;
	enum sym_open_e r = SYM_OPEN_ERRNO;
	int fd = -1, err = ENOENT;

	why[0] = '\0';
	if (!sym_pseudo_file(m->path))
		r = sym_open_elf(m->path, m->build_id, m->build_id_len, &fd, &err);
	if (r != SYM_OPEN_OK) {
		char what[2 * SYM_BUILD_ID_MAX + 128];
		char idhex[2 * SYM_BUILD_ID_MAX + 1];

		if (r == SYM_OPEN_MISMATCH) {
			sym_hex(idhex, sizeof(idhex), m->build_id, m->build_id_len);
			snprintf(what, sizeof(what),
			         "not the file the process mapped (its build id was %s)", idhex);
			m->flags = TFA_SYM_BUILD_ID_MISMATCH;
		} else {
			snprintf(what, sizeof(what), "%s",
			         r == SYM_OPEN_NOT_ELF      ? "not an ELF file"
			         : sym_pseudo_file(m->path) ? "no file"
			                                    : strerror(err));
			m->flags = TFA_SYM_NO_FILE;
		}
		fd = sym_open_by_build_id(s, m, file, sizeof(file));
		if (fd >= 0) {
			m->flags = TFA_SYM_DEBUG_BY_BUILD_ID;
			used = file;
			snprintf(why, sizeof(why), "%s: %s; using %s", name, what, file);
		} else {
			snprintf(why, sizeof(why), "%s: %s", name, what);
		}
	}
	if (fd >= 0) {
		/*
		 * A name of its own: libdwfl takes a second module of one name and one range for
		 * the first reported again, and drops both when their files differ.
		 */
		snprintf(dwname, sizeof(dwname), "%s#%zu", name, i);
		m->dm = dwfl_report_elf(s->dwfl, dwname, used, fd, m->bias, true);
		if (m->dm == NULL) {
			close(fd);
			m->flags = TFA_SYM_NO_FILE;
			snprintf(why, sizeof(why), "%s: %s", used, dwfl_errmsg(-1));
		}
	}
	m->why = sym_intern(s, why);
	if (m->dm != NULL && m->end <= m->start) {
		Dwarf_Addr lo = 0, hi = 0;

		dwfl_module_info(m->dm, NULL, &lo, &hi, NULL, NULL, NULL, NULL);
		m->start = lo;
		m->end = hi;
	}
}

static int
sym_cmp_order(const void *a, const void *b, void *arg)
{
	const struct sym_module *mods = arg;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	const struct sym_module *mi = &mods[i], *mj = &mods[j];

	if (mi->start != mj->start)
		return mi->start < mj->start ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* The module containing addr, the latest in the map when several do; NULL when none. */
static struct sym_module *
sym_find_module(tfa_symbolizer_t *s, uint64_t addr)
{
	struct sym_module *best = NULL;
	size_t lo = 0, hi = s->norder;
	size_t best_index = 0;

	/* lo: the number of modules starting at or below addr */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->mods[s->order[mid]].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i-- > 0 && s->maxend[i] > addr;) {
		struct sym_module *m = &s->mods[s->order[i]];

		if (addr < m->end && (best == NULL || s->order[i] > best_index)) {
			best = m;
			best_index = s->order[i];
		}
	}
	return best;
}

tfa_symbolizer_t *
tfa_symbolizer_new(const tfa_sym_module_t *mods, size_t n, const tfa_sym_options_t *opts, char *err,
                   size_t errlen)
{
	tfa_symbolizer_t *s;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (mods == NULL && n > 0) {
		sym_error(err, errlen, "no module map");
		return NULL;
	}
	elf_version(EV_CURRENT);
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto oom;
	if (opts != NULL && opts->debuginfo_path != NULL) {
		s->debuginfo_path = strdup(opts->debuginfo_path);
		if (s->debuginfo_path == NULL)
			goto oom;
	}
	s->callbacks.find_elf = dwfl_build_id_find_elf;
	s->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
	s->callbacks.section_address = dwfl_offline_section_address;
	s->callbacks.debuginfo_path = &s->debuginfo_path;
	s->dwfl = dwfl_begin(&s->callbacks);
	if (s->dwfl == NULL) {
		sym_error(err, errlen, "libdwfl: %s", dwfl_errmsg(-1));
		tfa_symbolizer_free(s);
		return NULL;
	}

	s->mods = calloc(n == 0 ? 1 : n, sizeof(*s->mods));
	s->order = calloc(n == 0 ? 1 : n, sizeof(*s->order));
	s->maxend = calloc(n == 0 ? 1 : n, sizeof(*s->maxend));
	if (s->mods == NULL || s->order == NULL || s->maxend == NULL)
		goto oom;
	s->nmods = n;

	dwfl_report_begin(s->dwfl);
	for (size_t i = 0; i < n; i++) {
		struct sym_module *m = &s->mods[i];

		m->path = sym_intern(s, mods[i].path != NULL ? mods[i].path : "");
		m->bias = mods[i].bias;
		m->start = mods[i].start;
		m->end = mods[i].end;
		if (mods[i].build_id != NULL && mods[i].build_id_len > 0) {
			uint8_t *id = sym_alloc(s, mods[i].build_id_len);

			if (id != NULL)
				memcpy(id, mods[i].build_id, mods[i].build_id_len);
			m->build_id = id;
			m->build_id_len = mods[i].build_id_len;
		}
		if (s->oom)
			goto oom;
		m->canon = m;
		for (size_t j = 0; j < i; j++) {
			struct sym_module *e = &s->mods[j];

			if (e->path == m->path && e->bias == m->bias
			    && e->build_id_len == m->build_id_len
			    && (m->build_id_len == 0
			        || memcmp(e->build_id, m->build_id, m->build_id_len) == 0)) {
				m->canon = e->canon;
				break;
			}
		}
		if (m->canon != m) {
			m->flags = m->canon->flags;
			m->why = m->canon->why;
			if (m->end <= m->start) {
				m->start = m->canon->start;
				m->end = m->canon->end;
			}
			continue;
		}
		sym_report(s, m, i);
		if (s->oom)
			goto oom;
	}
	if (dwfl_report_end(s->dwfl, NULL, NULL) != 0) {
		sym_error(err, errlen, "libdwfl: %s", dwfl_errmsg(-1));
		tfa_symbolizer_free(s);
		return NULL;
	}

	for (size_t i = 0; i < n; i++) {
		if (s->mods[i].end > s->mods[i].start)
			s->order[s->norder++] = i;
	}
	qsort_r(s->order, s->norder, sizeof(*s->order), sym_cmp_order, s->mods);
	for (size_t i = 0; i < s->norder; i++) {
		uint64_t end = s->mods[s->order[i]].end;

		s->maxend[i] = i > 0 && s->maxend[i - 1] > end ? s->maxend[i - 1] : end;
	}
	return s;

oom:
	sym_error(err, errlen, "out of memory");
	tfa_symbolizer_free(s);
	return NULL;
}

uint32_t
tfa_symbolizer_module_state(const tfa_symbolizer_t *s, size_t i, const char **why)
{
	if (i >= s->nmods) {
		if (why != NULL)
			*why = "";
		return 0;
	}
	if (why != NULL)
		*why = s->mods[i].why != NULL ? s->mods[i].why : "";
	return s->mods[i].flags;
}

size_t
tfa_symbolizer_cached(const tfa_symbolizer_t *s)
{
	return s->ncache;
}

void
tfa_symbolizer_free(tfa_symbolizer_t *s)
{
	struct sym_chunk *c, *next;

	if (s == NULL)
		return;
	for (size_t i = 0; i < s->nmods; i++) {
		struct sym_module *m = &s->mods[i];

		if (m->canon != m)
			continue; /* nothing of its own (and NULL when new failed before it) */
		for (size_t j = 0; j < m->cus_cap; j++)
			sym_cu_free(m->cus[j]);
		free(m->cus);
		free(m->syms);
	}
	if (s->dwfl != NULL)
		dwfl_end(s->dwfl);
	for (c = s->chunks; c != NULL; c = next) {
		next = c->next;
		free(c);
	}
	free(s->strs);
	free(s->cache);
	free(s->mods);
	free(s->order);
	free(s->maxend);
	free(s->debuginfo_path);
	free(s);
}

/* ---- one address ---------------------------------------------------------------------------- */

/* The raw (possibly mangled) name of a function DIE, through its abstract origin; NULL: none. */
static const char *
sym_die_raw_name(Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *name;

	name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
	if (name == NULL)
		name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
	if (name == NULL)
		name = dwarf_diename(die);
	return name;
}

static const char *
sym_node_function(tfa_symbolizer_t *s, struct sym_node *n)
{
	if (!n->named) {
		const char *raw = sym_die_raw_name(&n->die);

		n->function = raw != NULL ? sym_function_name(s, raw, strlen(raw)) : NULL;
		n->mangled = raw != NULL && raw[0] == '_' && raw[1] == 'Z';
		n->named = !s->oom;
	}
	return n->function;
}

/* Looks up the call site of the inlined subroutine n (DW_AT_call_file, _line, _column). */
static void
sym_node_call_site(tfa_symbolizer_t *s, struct sym_node *n)
{
	Dwarf_Attribute attr;
	Dwarf_Word fileidx, line, col;
	Dwarf_Files *files;
	Dwarf_Die cu;
	const char *file;

	if (n->sited)
		return;
	n->sited = true;
	if (dwarf_formudata(dwarf_attr(&n->die, DW_AT_call_line, &attr), &line) != 0 || line == 0
	    || line > UINT32_MAX)
		return;
	if (dwarf_formudata(dwarf_attr(&n->die, DW_AT_call_file, &attr), &fileidx) != 0)
		return;
	if (dwarf_diecu(&n->die, &cu, NULL, NULL) == NULL
	    || dwarf_getsrcfiles(&cu, &files, NULL) != 0)
		return;
	file = sym_source_path(s, dwarf_filesrc(files, fileidx, NULL, NULL), &cu);
	if (file == NULL) {
		n->sited = !s->oom;
		return;
	}
	n->call_file = file;
	n->call_line = (uint32_t)line;
	if (dwarf_formudata(dwarf_attr(&n->die, DW_AT_call_column, &attr), &col) == 0
	    && col <= UINT32_MAX)
		n->call_column = (uint32_t)col;
}

/* Sets f's file, line and column from the line table row of addr. */
static void
sym_line(tfa_symbolizer_t *s, Dwfl_Module *dm, uint64_t addr, tfa_sym_frame_t *f)
{
	Dwfl_Line *ln = dwfl_module_getsrc(dm, addr);
	const char *name;
	int line = 0, col = 0;

	if (ln == NULL)
		return;
	name = dwfl_lineinfo(ln, NULL, &line, &col, NULL, NULL);
	if (name == NULL || line <= 0)
		return;
	f->file = sym_source_path(s, name, dwfl_linecu(ln));
	if (f->file == NULL)
		return;
	f->line = (uint32_t)line;
	f->column = col > 0 ? (uint32_t)col : 0;
}

/*
 * The name of the real (outermost) function f of node n: DWARF's, unless
 * DWARF has none, or only a short DW_AT_name ("operator()" of a lambda) where
 * the symbol table has the mangled name of the same function (same entry).
 */
static void
sym_prefer_symbol(tfa_symbolizer_t *s, struct sym_node *n, struct sym_symbol *y, Dwarf_Addr bias,
                  tfa_sym_frame_t *f)
{
	Dwarf_Addr entry;

	if (f->function == NULL) {
		f->function = sym_symbol_function(s, y);
		return;
	}
	if (n->inlined || n->mangled || y->raw[0] != '_' || y->raw[1] != 'Z')
		return;
	if (dwarf_entrypc(&n->die, &entry) == 0 && entry + bias == y->addr)
		f->function = sym_symbol_function(s, y);
}

/*
 * The frames of addr (pc as asked) into out[0..SYM_MAX_FRAMES); returns
 * their number (>= 1), or -ENOMEM.
 */
static int
sym_resolve(tfa_symbolizer_t *s, uint64_t addr, uint64_t pc, tfa_sym_frame_t *out)
{
	struct sym_module *m = sym_find_module(s, addr);
	struct sym_symbol *y;
	struct sym_cu *cu = NULL;
	int32_t chain[SYM_MAX_FRAMES];
	Dwarf_Addr bias = 0;
	Dwarf_Die *cudie;
	int nf = 0;

	memset(&out[0], 0, sizeof(out[0]));
	out[0].pc = pc;
	if (m == NULL) {
		out[0].flags = TFA_SYM_NO_MODULE;
		return 1;
	}
	out[0].module = m->path;
	out[0].module_offset = pc - m->bias;
	out[0].flags = m->flags;
	m = m->canon;
	if (m->dm == NULL)
		return 1;

	y = sym_find_symbol(s, m, addr);
	cudie = dwfl_module_addrdie(m->dm, addr, &bias);
	if (cudie != NULL)
		cu = sym_cu_get(s, m, cudie);
	if (cu != NULL) {
		for (int32_t n = sym_cu_find(cu, addr - bias); n >= 0 && nf < SYM_MAX_FRAMES;
		     n = cu->nodes[n].parent) {
			chain[nf++] = n;
			if (!cu->nodes[n].inlined)
				break;
		}
	}

	sym_line(s, m->dm, addr, &out[0]);
	if (nf == 0) {
		if (y != NULL)
			out[0].function = sym_symbol_function(s, y);
		nf = 1;
	} else {
		for (int k = 0; k < nf; k++) {
			struct sym_node *node = &cu->nodes[chain[k]];

			if (k > 0) {
				struct sym_node *callee = &cu->nodes[chain[k - 1]];

				out[k] = out[0];
				out[k].flags = m->flags;
				sym_node_call_site(s, callee);
				out[k].file = callee->call_file;
				out[k].line = callee->call_file != NULL ? callee->call_line : 0;
				out[k].column = callee->call_file != NULL ? callee->call_column : 0;
			}
			if (k + 1 < nf)
				out[k].flags |= TFA_SYM_INLINED;
			out[k].function = sym_node_function(s, node);
		}
		if (y != NULL)
			sym_prefer_symbol(s, &cu->nodes[chain[nf - 1]], y, bias, &out[nf - 1]);
	}
	if (y != NULL)
		out[nf - 1].symbol_offset = pc - y->addr;
	if (s->oom) {
		s->oom = false;
		return -ENOMEM;
	}
	return nf;
}

static int
sym_cache_grow(tfa_symbolizer_t *s)
{
	size_t cap = s->cache_cap == 0 ? 4096 : s->cache_cap * 2;
	struct sym_entry *t = calloc(cap, sizeof(*t));

	if (t == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < s->cache_cap; i++) {
		struct sym_entry *e = &s->cache[i];
		size_t j;

		if (e->nframes == 0)
			continue;
		for (j = sym_hash_u64(e->pc ^ e->ret) & (cap - 1); t[j].nframes != 0;
		     j = (j + 1) & (cap - 1))
			;
		t[j] = *e;
	}
	free(s->cache);
	s->cache = t;
	s->cache_cap = cap;
	return 0;
}

static int
sym_lookup(tfa_symbolizer_t *s, uint64_t pc, bool ret, const tfa_sym_frame_t **frames,
           size_t *nframes)
{
	uint64_t addr = ret && pc != 0 ? pc - 1 : pc;
	tfa_sym_frame_t tmp[SYM_MAX_FRAMES];
	tfa_sym_frame_t *copy;
	struct sym_entry *e;
	size_t j;
	int n;

	if ((s->ncache + 1) * 2 > s->cache_cap && sym_cache_grow(s) != 0)
		return -ENOMEM;
	for (j = sym_hash_u64(pc ^ ret) & (s->cache_cap - 1); (e = &s->cache[j])->nframes != 0;
	     j = (j + 1) & (s->cache_cap - 1)) {
		if (e->pc == pc && e->ret == ret) {
			*frames = e->frames;
			*nframes = e->nframes;
			return 0;
		}
	}
	n = sym_resolve(s, addr, pc, tmp);
	if (n < 0)
		return n;
	copy = sym_alloc(s, (size_t)n * sizeof(*copy));
	if (copy == NULL) {
		s->oom = false;
		return -ENOMEM;
	}
	memcpy(copy, tmp, (size_t)n * sizeof(*copy));
	e->pc = pc;
	e->ret = ret;
	e->frames = copy;
	e->nframes = (uint32_t)n;
	s->ncache++;
	*frames = copy;
	*nframes = (size_t)n;
	return 0;
}

int
tfa_symbolize(tfa_symbolizer_t *s, uint64_t pc, const tfa_sym_frame_t **frames, size_t *nframes)
{
	return sym_lookup(s, pc, true, frames, nframes);
}

int
tfa_symbolize_addr(tfa_symbolizer_t *s, uint64_t addr, const tfa_sym_frame_t **frames,
                   size_t *nframes)
{
	return sym_lookup(s, addr, false, frames, nframes);
}
