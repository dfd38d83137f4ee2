/* SPDX-License-Identifier: MIT */
/*
 * A walk of the current thread's stack by the call frame information of
 * .eh_frame (x86-64), for TFA_STACKS_UNWIND.
 *
 * Each step from a frame to its caller needs three things at the frame's pc:
 * how to compute the CFA (the caller's %rsp: %rsp or %rbp plus an offset),
 * where the return address is saved (CFA - 8, in practice) and whether the
 * caller's %rbp is saved (at CFA + an offset) or still in %rbp.  That is the
 * rule of the pc, found once by interpreting the FDE's instructions up to it,
 * then kept in a cache keyed by the return address, so that a walk through
 * known code costs a probe of the cache and two loads per frame.  libunwind
 * 1.6's unw_backtrace does much the same once its per-thread trace cache
 * knows the frames (7 ns a frame here, this walk 4-5: one chain of
 * dependent loads either way); what this walk saves besides is libunwind's
 * fixed cost per capture (its cursor: unw_getcontext, unw_init_local, the
 * cache by pthread_getspecific) and a copy of every frame: 21% of the
 * instructions of trees 14 with stacks (see unwind.h).
 *
 * What the rule cannot say, the walk refuses (returns -1) and the caller
 * asks libunwind for the whole stack: a CFA that is not %rsp/%rbp + offset
 * (DWARF expressions, other registers), a return address or %rbp saved
 * anywhere but at CFA + offset, a signal frame (augmentation "S": the frame
 * after __restore_rt holds the interrupted registers in a ucontext), a pc
 * without unwind information (JIT code, a library without .eh_frame_hdr),
 * tables in encodings other than the ones gcc and ld write, a read outside
 * the stack's known bounds, a frame whose CFA does not lie above the last.
 *
 * Where the walk starts: the frame record of tfa_cfi_capture's caller
 * (which passes its __builtin_frame_address(0), so it has one): [fp] is
 * its caller's %rbp, [fp + 8] the return address into its caller, fp + 16
 * its caller's %rsp.  Not tfa_cfi_capture's own record: that would be one
 * more step of every walk, always dropped before the anchor.  From then on
 * every pc is a return address, and its rule is the one at
 * pc - 1, inside the call instruction (the call may be the last instruction
 * of its function: pc itself may belong to the next function's FDE).
 *
 * The cache: slots of {key, rule}, shared by every thread, in arena
 * memory.  A slot's key is claimed once, by compare-and-swap from 0,
 * and never changes again; its rule is one 64-bit word, stored after the
 * key, read with one load: neither can be seen torn.  A reader that finds
 * the key with no rule yet computes the rule itself.  When the probe
 * sequence (RULES_PROBES slots) is full, the table doubles if it can, or
 * the rule is computed and not kept.
 *
 * Its resident memory follows the return addresses the program's stacks
 * go through: RULES_SLOTS_MAX slots (1 MiB) are reserved at init, and only
 * the first mask + 1 are used, RULES_SLOTS_MIN (16 KiB) at first, doubled
 * when more than one slot in 2^RULES_LOAD_LOG2 is claimed.  (Slots spread
 * by a hash over the whole 1 MiB touched a page per key, nearly all of it
 * from a few hundred keys on.  Pages resident at exit, measured: sqlite3
 * 240 -> 32, git 225 -> 32, python3 253 -> 64, churn 33 -> 4; cc1plus,
 * 7,600 return addresses, 256 either way.)  A doubling raises the mask by
 * compare-and-swap; the thread that raised it copies the keys below the
 * old size to their slots under the new mask (a key's slot is its old one
 * or that plus the old size: about half are found where they are).
 * Nothing is cleared, keys never change: a copy left behind only takes a
 * slot.  A walk reads the mask once: one that started before a doubling
 * still finds its keys, and a rule it stores where only the old mask
 * looks is computed once more later.  No lock and no mapping: a doubling
 * in a signal handler is as safe as a slot claimed there.
 *
 * Unloaded libraries: a rule cached for a library that dlclose unmapped
 * would be wrong for a library mapped at the same address later.  Each rule
 * carries the generation it was computed in; tfa_cfi_flush (called by the
 * shim's dlclose after the real one returns) advances the generation, and
 * a rule of an older one is computed again on its next use, in its slot.  A lookup per frame through the loader (_dl_find_object, the
 * object's identity in each rule) would be exact for every unload, those
 * glibc makes internally too (iconv's gconv modules), but costs more than
 * the rest of the step.  (libunwind's trace cache keeps its rules even through
 * unw_flush_cache: see check_cfi's dlclose case.)
 * The generation is read once per walk, before the rules are computed, so a
 * rule computed from a library unloaded during the walk is older than the
 * flush that follows the unload.  24 bits of it are kept: a rule unused
 * through 16 million dlcloses could be taken for new.  "No object holds
 * this pc" is never cached: a library may be loaded there later without a
 * dlclose before it.
 *
 * Async-signal-safe: a capture in a signal handler that interrupted a walk
 * on the same thread only reads the cache, or claims a free slot by
 * compare-and-swap, as another thread would; _dl_find_object takes no lock.
 */
#include "core/cfi.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "core/arena.h"

#define RULES_SLOTS_MAX   (1u << 16) /* reserved: 1 MiB */
#define RULES_SLOTS_MIN   (1u << 10) /* in use at first: 16 KiB */
#define RULES_LOAD_LOG2   3          /* doubled above one key in 8 slots */
#define RULES_FAST_PROBES 3          /* slots of its probe sequence fast_step reads */
#define RULES_PROBES      16

/* Below this, a "return address" is a small integer: something went wrong. */

/* DWARF register numbers of x86-64. */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA  16

/*
 * A rule, packed in one word:
 *   bits  0-23  generation (never 0: 0 is "no rule")
 *   bits 24-25  kind: the CFA is %rsp + off, %rbp + off, the frame is the
 *               outermost (return address undefined), or unsupported
 *   bit  26     the caller's %rbp is saved at CFA + rbp_off
 *   bit  27     fast_step leaves the frame to slow_step: the return address is not at
 *               CFA - 8, or the CFA is %rsp + an offset below 8 (not above the frame)
 *   bits 28-35  ra_off / 8  (signed)
 *   bits 36-43  rbp_off / 8 (signed)
 *   bits 44-63  cfa_off in bytes (signed; a multiple of 8, frames up to 256 KiB):
 *               one arithmetic shift gives it to the walk
 */
enum { KIND_RSP = 0, KIND_RBP = 1, KIND_LAST = 2, KIND_NONE = 3 };
#define GEN_MASK ((uint64_t)0xffffff)
#define RULE_CFA_RBP   ((uint64_t)KIND_RBP << 24)
#define RULE_RBP_SAVED ((uint64_t)1 << 26)
#define RULE_SLOW      ((uint64_t)1 << 27)
/* The bits fast_step wants equal to the generation alone: KIND_LAST and KIND_NONE have bit 25. */
#define RULE_FAST_MASK (GEN_MASK | (uint64_t)1 << 25 | RULE_SLOW)

typedef struct slot_s {
	uintptr_t key;
	uint64_t rule;
} slot_t;

/*
 * fast_step reads up to RULES_FAST_PROBES - 1 slots after the last without
 * wrapping: never claimed, their page never touched.
 */
#define RULES_RESERVE                                                                              \
	(((RULES_SLOTS_MAX + RULES_FAST_PROBES - 1) * sizeof(slot_t) + 4095) & ~(size_t)4095)
_Static_assert(RULES_FAST_PROBES == 3 && RULES_FAST_PROBES <= RULES_PROBES,
	       "fast_step reads three slots, unrolled");

static slot_t *slots; /* published with release by tfa_cfi_init */
static uint32_t cache_mask = RULES_SLOTS_MIN - 1; /* the slots in use, minus 1: only grows */
static uint32_t cache_keys;                        /* slots claimed, copies left behind included */
static uint32_t generation = 1;
static uint64_t refusals;
static uint64_t rules_computed; /* misses of the cache: each reads the DWARF tables */

static TFA_ALWAYS_INLINE unsigned
rule_kind(uint64_t r)
{
	return (unsigned)(r >> 24) & 3;
}

#define RULE_RA_OFF  28
#define RULE_RBP_OFF 36
#define RULE_CFA_OFF 44

static TFA_ALWAYS_INLINE int64_t
rule_field(uint64_t r, unsigned shift)
{
	return (int64_t)(int8_t)(uint8_t)(r >> shift) * 8;
}

static TFA_ALWAYS_INLINE int64_t
rule_cfa_off(uint64_t r)
{
	return (int64_t)r >> RULE_CFA_OFF;
}

static uint64_t
pack_rule(uint32_t gen, unsigned kind, bool rbp_saved, int64_t ra_off, int64_t rbp_off,
	  int64_t cfa_off)
{
	if (kind == KIND_RSP || kind == KIND_RBP) {
		if ((ra_off & 7) != 0 || (rbp_off & 7) != 0 || (cfa_off & 7) != 0
		    || ra_off / 8 < INT8_MIN || ra_off / 8 > INT8_MAX || rbp_off / 8 < INT8_MIN
		    || rbp_off / 8 > INT8_MAX || cfa_off / 8 < INT16_MIN || cfa_off / 8 > INT16_MAX)
			kind = KIND_NONE;
	}
	if (kind != KIND_RSP && kind != KIND_RBP)
		return gen | (uint64_t)kind << 24;
	return gen | (uint64_t)kind << 24 | (uint64_t)rbp_saved << 26
	       | (ra_off != -8 || (kind == KIND_RSP && cfa_off < 8) ? RULE_SLOW : 0)
	       | (uint64_t)(uint8_t)(int8_t)(ra_off / 8) << RULE_RA_OFF
	       | (uint64_t)(uint8_t)(int8_t)(rbp_off / 8) << RULE_RBP_OFF
	       | (uint64_t)cfa_off << RULE_CFA_OFF;
}

/* ---- reading the tables ------------------------------------------------------------------- */

/* A bounded reader of .eh_frame bytes; `bad` once anything ran past the end. */
typedef struct cursor_s {
	const uint8_t *p, *end;
	bool bad;
} cursor_t;

static uint8_t
get_u8(cursor_t *c)
{
	if (c->p >= c->end) {
		c->bad = true;
		return 0;
	}
	return *c->p++;
}

static uint64_t
get_fixed(cursor_t *c, size_t n)
{
	uint64_t v = 0;

	if ((size_t)(c->end - c->p) < n) {
		c->bad = true;
		c->p = c->end;
		return 0;
	}
	memcpy(&v, c->p, n); /* little-endian */
	c->p += n;
	return v;
}

/* A LEB128 number's bits; *shift: how many it has, *last: its last byte (the sign is the caller's). */
static uint64_t
get_leb(cursor_t *c, unsigned *shift, uint8_t *last)
{
	uint64_t v = 0;
	uint8_t b;

	*shift = 0;
	do {
		b = get_u8(c);
		if (*shift < 64)
			v |= (uint64_t)(b & 0x7f) << *shift;
		*shift += 7;
	} while ((b & 0x80) != 0 && !c->bad);
	*last = b;
	return v;
}

static uint64_t
get_uleb(cursor_t *c)
{
	unsigned shift;
	uint8_t last;

	return get_leb(c, &shift, &last);
}

static int64_t
get_sleb(cursor_t *c)
{
	unsigned shift;
	uint8_t last;
	uint64_t v = get_leb(c, &shift, &last);

	if (shift < 64 && (last & 0x40) != 0)
		v |= ~(uint64_t)0 << shift;
	return (int64_t)v;
}

#define PE_OMIT    0xff
#define PE_ABSPTR  0x00
#define PE_ULEB    0x01
#define PE_UDATA2  0x02
#define PE_UDATA4  0x03
#define PE_UDATA8  0x04
#define PE_SLEB    0x09
#define PE_SDATA2  0x0a
#define PE_SDATA4  0x0b
#define PE_SDATA8  0x0c
#define PE_PCREL   0x10
#define PE_DATAREL 0x30
#define PE_INDIRECT 0x80

/*
 * A pointer in encoding enc: absolute or pc-relative (what gcc and ld
 * write); with `apply` false, only the value (the FDE's address range).
 * Indirect pointers are skipped, never followed: false for the rest.
 */
static bool
get_encoded(cursor_t *c, uint8_t enc, bool apply, uintptr_t *out)
{
	const uint8_t *field = c->p;
	uint64_t v;

	switch (enc & 0x0f) {
	case PE_ABSPTR:
	case PE_UDATA8:
	case PE_SDATA8:
		v = get_fixed(c, 8);
		break;
	case PE_UDATA2:
		v = get_fixed(c, 2);
		break;
	case PE_SDATA2:
		v = (uint64_t)(int64_t)(int16_t)get_fixed(c, 2);
		break;
	case PE_UDATA4:
		v = get_fixed(c, 4);
		break;
	case PE_SDATA4:
		v = (uint64_t)(int64_t)(int32_t)get_fixed(c, 4);
		break;
	case PE_ULEB:
		v = get_uleb(c);
		break;
	case PE_SLEB:
		v = (uint64_t)get_sleb(c);
		break;
	default:
		return false;
	}
	if (c->bad)
		return false;
	if (apply) {
		switch (enc & 0x70) {
		case 0:
			break;
		case PE_PCREL:
			v += (uint64_t)(uintptr_t)field;
			break;
		default:
			return false;
		}
	}
	*out = (uintptr_t)v;
	return true;
}

/* ---- the CFA instructions ----------------------------------------------------------------- */

enum { HOW_SAME = 0, HOW_UNDEF, HOW_OFFSET, HOW_OTHER };

typedef struct reg_rule_s {
	uint8_t how;
	int64_t off;
} reg_rule_t;

typedef struct row_s {
	uint64_t cfa_reg;
	int64_t cfa_off;
	bool cfa_other; /* an expression */
	reg_rule_t rbp, rsp, ra;
} row_t;

#define STATE_STACK_MAX 8

typedef struct interp_s {
	uint64_t code_align;
	int64_t data_align;
	uint8_t fde_enc;
	uintptr_t target; /* the pc whose row is wanted */
	uintptr_t loc;
	row_t row;
	row_t initial; /* after the CIE's instructions: what DW_CFA_restore goes back to */
	row_t stack[STATE_STACK_MAX];
	unsigned depth;
} interp_t;

static reg_rule_t *
reg_of(row_t *row, uint64_t reg)
{
	switch (reg) {
	case REG_RBP:
		return &row->rbp;
	case REG_RSP:
		return &row->rsp;
	case REG_RA:
		return &row->ra;
	}
	return NULL; /* a register the walk does not need */
}

static void
set_reg(row_t *row, uint64_t reg, uint8_t how, int64_t off)
{
	reg_rule_t *r = reg_of(row, reg);

	if (r != NULL) {
		r->how = how;
		r->off = off;
	}
}

/* Moves loc on by delta; false once the target lies before the new location. */
static bool
advance(interp_t *s, uint64_t delta)
{
	uintptr_t next = s->loc + (uintptr_t)(delta * s->code_align);

	if (next > s->target)
		return false;
	s->loc = next;
	return true;
}

enum { RUN_DONE, RUN_BAD };

/*
 * Runs instructions until they end or reach past the target.  in_cie: the
 * CIE's initial instructions, where DW_CFA_restore has nothing to go to.
 */
static int
run(interp_t *s, cursor_t *c, bool in_cie)
{
	while (c->p < c->end) {
		uint8_t op = get_u8(c);
		uint64_t reg, v;
		int64_t off;
		uintptr_t addr;
		reg_rule_t *r;

		switch (op & 0xc0) {
		case 0x40: /* DW_CFA_advance_loc */
			if (!advance(s, op & 0x3f))
				return RUN_DONE;
			continue;
		case 0x80: /* DW_CFA_offset */
			off = (int64_t)get_uleb(c) * s->data_align;
			set_reg(&s->row, op & 0x3f, HOW_OFFSET, off);
			continue;
		case 0xc0: /* DW_CFA_restore */
			if (in_cie)
				return RUN_BAD;
			r = reg_of(&s->row, op & 0x3f);
			if (r != NULL)
				*r = *reg_of(&s->initial, op & 0x3f);
			continue;
		}
		switch (op) {
		case 0x00: /* DW_CFA_nop */
			break;
		case 0x01: /* DW_CFA_set_loc */
			if (!get_encoded(c, s->fde_enc, true, &addr))
				return RUN_BAD;
			if (addr > s->target)
				return RUN_DONE;
			s->loc = addr;
			break;
		case 0x02: /* DW_CFA_advance_loc1 */
			if (!advance(s, get_fixed(c, 1)))
				return RUN_DONE;
			break;
		case 0x03: /* DW_CFA_advance_loc2 */
			if (!advance(s, get_fixed(c, 2)))
				return RUN_DONE;
			break;
		case 0x04: /* DW_CFA_advance_loc4 */
			if (!advance(s, get_fixed(c, 4)))
				return RUN_DONE;
			break;
		case 0x05: /* DW_CFA_offset_extended */
			reg = get_uleb(c);
			off = (int64_t)get_uleb(c) * s->data_align;
			set_reg(&s->row, reg, HOW_OFFSET, off);
			break;
		case 0x06: /* DW_CFA_restore_extended */
			reg = get_uleb(c);
			if (in_cie)
				return RUN_BAD;
			r = reg_of(&s->row, reg);
			if (r != NULL)
				*r = *reg_of(&s->initial, reg);
			break;
		case 0x07: /* DW_CFA_undefined */
			set_reg(&s->row, get_uleb(c), HOW_UNDEF, 0);
			break;
		case 0x08: /* DW_CFA_same_value */
			set_reg(&s->row, get_uleb(c), HOW_SAME, 0);
			break;
		case 0x09: /* DW_CFA_register */
			reg = get_uleb(c);
			(void)get_uleb(c);
			set_reg(&s->row, reg, HOW_OTHER, 0);
			break;
		case 0x0a: /* DW_CFA_remember_state */
			if (s->depth == STATE_STACK_MAX)
				return RUN_BAD;
			s->stack[s->depth++] = s->row;
			break;
		case 0x0b: /* DW_CFA_restore_state */
			if (s->depth == 0)
				return RUN_BAD;
			s->row = s->stack[--s->depth];
			break;
		case 0x0c: /* DW_CFA_def_cfa */
			s->row.cfa_reg = get_uleb(c);
			s->row.cfa_off = (int64_t)get_uleb(c);
			s->row.cfa_other = false;
			break;
		case 0x0d: /* DW_CFA_def_cfa_register */
			s->row.cfa_reg = get_uleb(c);
			break;
		case 0x0e: /* DW_CFA_def_cfa_offset */
			s->row.cfa_off = (int64_t)get_uleb(c);
			break;
		case 0x0f: /* DW_CFA_def_cfa_expression */
			v = get_uleb(c);
			if (v > (uint64_t)(c->end - c->p))
				return RUN_BAD;
			c->p += v;
			s->row.cfa_other = true;
			break;
		case 0x10: /* DW_CFA_expression */
		case 0x16: /* DW_CFA_val_expression */
			reg = get_uleb(c);
			v = get_uleb(c);
			if (v > (uint64_t)(c->end - c->p))
				return RUN_BAD;
			c->p += v;
			set_reg(&s->row, reg, HOW_OTHER, 0);
			break;
		case 0x11: /* DW_CFA_offset_extended_sf */
			reg = get_uleb(c);
			off = get_sleb(c) * s->data_align;
			set_reg(&s->row, reg, HOW_OFFSET, off);
			break;
		case 0x12: /* DW_CFA_def_cfa_sf */
			s->row.cfa_reg = get_uleb(c);
			s->row.cfa_off = get_sleb(c) * s->data_align;
			s->row.cfa_other = false;
			break;
		case 0x13: /* DW_CFA_def_cfa_offset_sf */
			s->row.cfa_off = get_sleb(c) * s->data_align;
			break;
		case 0x14: /* DW_CFA_val_offset */
			reg = get_uleb(c);
			(void)get_uleb(c);
			set_reg(&s->row, reg, HOW_OTHER, 0);
			break;
		case 0x15: /* DW_CFA_val_offset_sf */
			reg = get_uleb(c);
			(void)get_sleb(c);
			set_reg(&s->row, reg, HOW_OTHER, 0);
			break;
		case 0x2e: /* DW_CFA_GNU_args_size: only for landing pads */
			(void)get_uleb(c);
			break;
		case 0x2f: /* DW_CFA_GNU_negative_offset_extended */
			reg = get_uleb(c);
			off = -(int64_t)get_uleb(c) * s->data_align;
			set_reg(&s->row, reg, HOW_OFFSET, off);
			break;
		default:
			return RUN_BAD;
		}
		if (c->bad)
			return RUN_BAD;
	}
	return c->bad ? RUN_BAD : RUN_DONE;
}

/* ---- finding the FDE ---------------------------------------------------------------------- */

/*
 * The FDE covering pc in the object whose .eh_frame_hdr is at hdr: its
 * binary-search table, as ld writes it (sdata4 offsets from the header).
 * NULL when none does or the header is in another form.
 */
static const uint8_t *
find_fde(const uint8_t *hdr, uintptr_t pc)
{
	if (hdr[0] != 1 || hdr[1] != (PE_PCREL | PE_SDATA4) || hdr[2] != PE_UDATA4
	    || hdr[3] != (PE_DATAREL | PE_SDATA4))
		return NULL;
	uint32_t count;
	memcpy(&count, hdr + 8, sizeof(count));
	const uint8_t *table = hdr + 12;
	uintptr_t base = (uintptr_t)hdr;
	uint32_t lo = 0, hi = count;

	/* The last entry whose start is at or below pc. */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int32_t start;
		memcpy(&start, table + (size_t)mid * 8, sizeof(start));
		if (base + (intptr_t)start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	int32_t fde;
	memcpy(&fde, table + (size_t)(lo - 1) * 8 + 4, sizeof(fde));
	return (const uint8_t *)(base + (intptr_t)fde);
}

/* A length-prefixed record (CIE or FDE): its body, after the 4-byte length. */
static bool
record_body(const uint8_t *rec, cursor_t *body)
{
	uint32_t len;

	memcpy(&len, rec, sizeof(len));
	if (len == 0 || len == UINT32_MAX) /* the end marker, or a 64-bit record */
		return false;
	body->p = rec + 4;
	body->end = rec + 4 + len;
	body->bad = false;
	return true;
}

/* The rule at pc (a return address - 1), of generation gen. */
static uint64_t
compute_rule(uintptr_t pc, uint32_t gen, bool *cacheable)
{
	const uint64_t none = pack_rule(gen, KIND_NONE, false, 0, 0, 0);
	struct dl_find_object obj;
	int saved_errno = errno;
	int found = _dl_find_object((void *)pc, &obj);

	errno = saved_errno;
	*cacheable = found == 0;
	if (found != 0 || obj.dlfo_eh_frame == NULL)
		return none;
	const uint8_t *fde = find_fde(obj.dlfo_eh_frame, pc);
	cursor_t f, cie_c;
	if (fde == NULL || !record_body(fde, &f))
		return none;

	/* The FDE's CIE pointer: the distance back from the field to the CIE. */
	const uint8_t *cie_field = f.p;
	uint32_t cie_dist = (uint32_t)get_fixed(&f, 4);
	if (f.bad || cie_dist == 0)
		return none;
	const uint8_t *cie = cie_field - cie_dist;
	if (!record_body(cie, &cie_c) || get_fixed(&cie_c, 4) != 0)
		return none;

	/* The CIE: version, augmentation, alignment factors, return address column. */
	interp_t s;
	memset(&s, 0, sizeof(s));
	uint8_t version = get_u8(&cie_c);
	const char *aug = (const char *)cie_c.p;
	size_t aug_len = strnlen(aug, (size_t)(cie_c.end - cie_c.p));
	if (aug_len == (size_t)(cie_c.end - cie_c.p))
		return none;
	cie_c.p += aug_len + 1;
	if (version != 1 && version != 3 && version != 4)
		return none;
	if (version == 4 && (get_u8(&cie_c) != 8 || get_u8(&cie_c) != 0))
		return none; /* address size, segment selector size */
	s.code_align = get_uleb(&cie_c);
	s.data_align = get_sleb(&cie_c);
	uint64_t ra_reg = version == 1 ? get_u8(&cie_c) : get_uleb(&cie_c);
	if (cie_c.bad || ra_reg != REG_RA)
		return none;
	s.fde_enc = PE_ABSPTR;
	bool has_aug_data = aug[0] == 'z';
	if (has_aug_data) {
		uint64_t n = get_uleb(&cie_c);
		if (cie_c.bad || n > (uint64_t)(cie_c.end - cie_c.p))
			return none;
		cursor_t a = { cie_c.p, cie_c.p + n, false };
		cie_c.p += n;
		for (size_t i = 1; i < aug_len; i++) {
			uintptr_t ignored;
			uint8_t enc;
			switch (aug[i]) {
			case 'R':
				s.fde_enc = get_u8(&a);
				break;
			case 'L':
				(void)get_u8(&a);
				break;
			case 'P':
				enc = get_u8(&a);
				if (!get_encoded(&a, enc & ~PE_INDIRECT, false, &ignored))
					return none;
				break;
			default: /* 'S': a signal frame; anything else is unknown */
				return none;
			}
			if (a.bad)
				return none;
		}
	} else if (aug_len != 0) {
		return none;
	}

	/* The FDE: its range, augmentation data, instructions. */
	uintptr_t start, range;
	if (!get_encoded(&f, s.fde_enc, true, &start)
	    || !get_encoded(&f, s.fde_enc & 0x0f, false, &range))
		return none;
	if (pc < start || pc - start >= range)
		return none;
	if (has_aug_data) {
		uint64_t n = get_uleb(&f);
		if (f.bad || n > (uint64_t)(f.end - f.p))
			return none;
		f.p += n;
	}

	s.target = pc;
	s.loc = start;
	s.row.cfa_reg = REG_RSP;
	if (run(&s, &cie_c, true) != RUN_DONE)
		return none;
	s.initial = s.row;
	s.depth = 0;
	if (run(&s, &f, false) != RUN_DONE)
		return none;

	const row_t *row = &s.row;
	if (row->ra.how == HOW_UNDEF)
		return pack_rule(gen, KIND_LAST, false, 0, 0, 0);
	if (row->cfa_other || (row->cfa_reg != REG_RSP && row->cfa_reg != REG_RBP)
	    || row->rsp.how != HOW_SAME || row->ra.how != HOW_OFFSET
	    || (row->rbp.how != HOW_SAME && row->rbp.how != HOW_OFFSET))
		return none;
	return pack_rule(gen, row->cfa_reg == REG_RSP ? KIND_RSP : KIND_RBP,
			 row->rbp.how == HOW_OFFSET, row->ra.off, row->rbp.off, row->cfa_off);
}

/* ---- the cache ----------------------------------------------------------------------------- */

/*
 * The slot of return address pc among mask + 1: bits 2 and up of pc, no
 * hash.  Return addresses are at least 2 bytes apart (a call is), rarely
 * less than 4; code of different objects, or 4 * (mask + 1) bytes apart,
 * shares slots about as often as under a hash (simulated on the keys of
 * sqlite3, git, python3, cc1plus: as many in their first slot, no longer
 * probe sequences).  On the walk's every frame, slot_at: pc & (mask << 2)
 * is the slot's offset / 4, an and and a scaled address where the hash
 * took a multiplication, two shifts and an add.
 */
static TFA_ALWAYS_INLINE uint32_t
slot_of(uintptr_t pc, uint32_t mask)
{
	return (uint32_t)(pc >> 2) & mask;
}

/* &table[slot_of(pc, mask)], given mask4 = mask << 2 (one register for the walk). */
static TFA_ALWAYS_INLINE const slot_t *
slot_at(const slot_t *table, uintptr_t pc, uintptr_t mask4)
{
	return (const slot_t *)((const char *)table + (pc & mask4) * 4);
}

enum { KEEP_FULL, KEEP_FOUND, KEEP_CLAIMED };

/*
 * Stores ra's rule in the probe sequence of ra under mask: in ra's slot,
 * or a free one claimed for it (KEEP_CLAIMED).  KEEP_FULL: no room, not
 * kept.  overwrite false (grow's copies): a slot that has ra already is
 * left as it is, it may hold a newer rule than the copy.
 */
static int
keep(slot_t *table, uint32_t mask, uintptr_t ra, uint64_t rule, bool overwrite)
{
	uint32_t i = slot_of(ra, mask);

	for (unsigned probe = 0; probe < RULES_PROBES; probe++, i = (i + 1) & mask) {
		slot_t *s = &table[i];
		uintptr_t key = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
		if (key == 0) {
			if (__atomic_compare_exchange_n(&s->key, &key, ra, false, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE)) {
				__atomic_store_n(&s->rule, rule, __ATOMIC_RELEASE);
				__atomic_fetch_add(&cache_keys, 1, __ATOMIC_RELAXED);
				return KEEP_CLAIMED;
			}
			if (key != ra)
				continue; /* another pc took it */
		}
		if (key == ra) {
			/* A racing store of another generation's rule is fixed at its next use. */
			if (overwrite)
				__atomic_store_n(&s->rule, rule, __ATOMIC_RELEASE);
			return KEEP_FOUND;
		}
	}
	return KEEP_FULL;
}

/*
 * Doubles the table in use, from mask + 1 slots if that is still its size
 * (see the header comment).  The copies are claimed as any key is: a walk
 * that stores the same key meanwhile leaves one slot for it.
 */
static TFA_NOINLINE void
grow(slot_t *table, uint32_t mask)
{
	uint32_t bigger = mask * 2 + 1;

	if (bigger >= RULES_SLOTS_MAX
	    || !__atomic_compare_exchange_n(&cache_mask, &mask, bigger, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_RELAXED))
		return; /* at its largest, or another thread doubled it */
	for (uint32_t j = 0; j <= mask; j++) {
		uintptr_t key = __atomic_load_n(&table[j].key, __ATOMIC_ACQUIRE);
		uint64_t rule = __atomic_load_n(&table[j].rule, __ATOMIC_ACQUIRE);
		if (key != 0 && rule != 0)
			(void)keep(table, bigger, key, rule, false);
	}
}

/* The rule of return address ra, computed when the cache does not have it for gen. */
static TFA_NOINLINE uint64_t
rule_miss(slot_t *table, uint32_t mask, uintptr_t ra, uint32_t gen)
{
	bool cacheable;
	uint64_t rule = compute_rule(ra - 1, gen, &cacheable);

	__atomic_fetch_add(&rules_computed, 1, __ATOMIC_RELAXED);
	if (!cacheable)
		return rule;
	int kept = keep(table, mask, ra, rule, true);
	if (kept == KEEP_FULL
	    || (kept == KEEP_CLAIMED
		&& __atomic_load_n(&cache_keys, __ATOMIC_RELAXED) > (mask + 1) >> RULES_LOAD_LOG2)) {
		grow(table, mask);
		uint32_t now = __atomic_load_n(&cache_mask, __ATOMIC_ACQUIRE);
		if (kept == KEEP_FULL && now != mask)
			(void)keep(table, now, ra, rule, true);
	}
	return rule;
}

static TFA_ALWAYS_INLINE uint64_t
rule_of(slot_t *table, uint32_t mask, uintptr_t ra, uint32_t gen)
{
	uint32_t i = slot_of(ra, mask);

	for (unsigned probe = 0; probe < RULES_PROBES; probe++, i = (i + 1) & mask) {
		const slot_t *s = &table[i];
		uintptr_t key = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
		if (tfa_likely(key == ra)) {
			uint64_t rule = __atomic_load_n(&s->rule, __ATOMIC_ACQUIRE);
			if (tfa_likely((rule & GEN_MASK) == gen))
				return rule;
			break;
		}
		if (key == 0)
			break;
	}
	return rule_miss(table, mask, ra, gen);
}

/* ---- the walk ----------------------------------------------------------------------------- */

static TFA_COLD int
refuse(void)
{
	__atomic_fetch_add(&refusals, 1, __ATOMIC_RELAXED);
	return -1;
}

/*
 * Where a walk is: the frame's return address, and the registers its caller
 * gets back; and where the last step read the return address and %rbp (0:
 * not read).
 */
typedef struct walk_s {
	uintptr_t pc, sp, bp;
	uintptr_t ra_at, bp_at;
} walk_t;

enum { STEP_ON, STEP_END, STEP_REFUSE, STEP_SLOW };

/*
 * One step to the caller's frame by the rule of any kind, the new pc
 * checked: every case fast_step does not take goes through here.
 * [lo, stack_end - 8]: where a stack slot may be read.
 */
__attribute__((no_sanitize_address)) static TFA_NOINLINE int
slow_step(slot_t *table, uint32_t mask, uint32_t gen, uintptr_t lo, uintptr_t stack_end,
	  walk_t *w)
{
	uint64_t rule = rule_of(table, mask, w->pc, gen);
	unsigned kind = rule_kind(rule);
	if (kind == KIND_LAST)
		return STEP_END;
	if (kind == KIND_NONE)
		return STEP_REFUSE;
	uintptr_t cfa = (kind == KIND_RSP ? w->sp : w->bp) + (uintptr_t)rule_cfa_off(rule);
	uintptr_t ra_at = cfa + (uintptr_t)rule_field(rule, RULE_RA_OFF);
	/* The caller's frame lies above this one, on the stack, 8-aligned. */
	if (cfa <= w->sp || ra_at < lo || ra_at > stack_end - 8 || (ra_at & 7) != 0)
		return STEP_REFUSE;
	if (rule & RULE_RBP_SAVED) {
		uintptr_t bp_at = cfa + (uintptr_t)rule_field(rule, RULE_RBP_OFF);
		if (bp_at < lo || bp_at > stack_end - 8 || (bp_at & 7) != 0)
			return STEP_REFUSE;
		w->bp = *(const uintptr_t *)bp_at;
		w->bp_at = bp_at;
	}
	w->pc = *(const uintptr_t *)ra_at;
	w->ra_at = ra_at;
	w->sp = cfa;
	if (w->pc == 0)
		return STEP_END; /* as libunwind: a zero return address ends the stack */
	return w->pc < TFA_PC_MIN ? STEP_REFUSE : STEP_ON;
}

/*
 * The step of nearly every frame: its rule in the first slot probed, of
 * this generation, the CFA %rsp or %rbp plus an offset, the return address
 * at CFA - 8.  STEP_SLOW: the frame is slow_step's (nothing changed).
 * STEP_ON: the caller's frame, its pc not checked yet.  STEP_END: the
 * outermost frame.
 *
 * The bounds: the return address and the saved %rbp lie in [*sp, stack_end
 * - 8], 8-aligned.  *sp is 8-aligned (a CFA checked here, or the walk's
 * start) and the rule's offsets are multiples of 8: a CFA of %rsp + an
 * offset, which the rule says is 8 or more (RULE_SLOW), is aligned and
 * above the frame without a test.  A saved %rbp is taken from the frame's
 * own slots only, [*sp, cfa - 8) (slow_step takes it anywhere on the
 * stack).
 */
__attribute__((no_sanitize_address)) static TFA_ALWAYS_INLINE int
fast_step(const slot_t *table, uintptr_t mask4, uint64_t gen, uintptr_t stack_end, uintptr_t *pc,
	  uintptr_t *sp, uintptr_t *bp, uintptr_t *bp_slot)
{
	const slot_t *s = slot_at(table, *pc, mask4);
	if (tfa_unlikely(__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) != *pc)) {
		/*
		 * The next slots of its probe sequence (RULES_FAST_PROBES in all),
		 * where a key that found its own taken nearly always is: a table
		 * that doubles is fuller than the hashed 1 MiB was, and the copies
		 * doubling leaves behind take slots.  Only a miss in the first
		 * pays.  Not wrapped to slot 0 after the last: a slot with this
		 * key has its rule wherever it lies, and the reserve has the
		 * slots past the largest table.
		 */
		s++;
		if (__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) != *pc) {
			s++;
			if (__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) != *pc)
				return STEP_SLOW;
		}
	}
	uint64_t rule = __atomic_load_n(&s->rule, __ATOMIC_ACQUIRE);
	if (tfa_unlikely((rule & RULE_FAST_MASK) != gen)) {
		/* The outermost frame ends every walk that gets to it: not worth slow_step's call. */
		if ((rule & (GEN_MASK | (uint64_t)3 << 24)) == (gen | (uint64_t)KIND_LAST << 24))
			return STEP_END;
		return STEP_SLOW;
	}
	uintptr_t cfa;
	if (rule & RULE_CFA_RBP) {
		cfa = *bp + (uintptr_t)rule_cfa_off(rule);
		if (tfa_unlikely(cfa <= *sp || (cfa & 7) != 0))
			return STEP_SLOW;
	} else {
		cfa = *sp + (uintptr_t)rule_cfa_off(rule);
	}
	if (tfa_unlikely(cfa > stack_end))
		return STEP_SLOW;
	if (rule & RULE_RBP_SAVED) {
		uintptr_t bp_at = cfa + (uintptr_t)rule_field(rule, RULE_RBP_OFF);
		if (tfa_unlikely(bp_at < *sp || bp_at >= cfa - 8))
			return STEP_SLOW;
		*bp = *(const uintptr_t *)bp_at;
		*bp_slot = bp_at;
	} else {
		*bp_slot = 0;
	}
	*pc = *(const uintptr_t *)(cfa - 8);
	*sp = cfa;
	return STEP_ON;
}

/*
 * slow_step on registers: the walk's state stays out of memory on the fast
 * path.  Not instrumented either: inlined in tfa_cfi_capture, whose frame
 * ASan does not unpoison on return, the scope of w would leave its poison
 * on the stack (GCC).
 */
__attribute__((no_sanitize_address)) static TFA_ALWAYS_INLINE int
slow_step_regs(slot_t *table, uintptr_t mask4, uint64_t gen, uintptr_t lo, uintptr_t stack_end,
	       uintptr_t *pc, uintptr_t *sp, uintptr_t *bp, uintptr_t *ra_at, uintptr_t *bp_at)
{
	walk_t w = { *pc, *sp, *bp, 0, 0 };
	int r = slow_step(table, (uint32_t)(mask4 >> 2), (uint32_t)gen, lo, stack_end, &w);

	*pc = w.pc;
	*sp = w.sp;
	*bp = w.bp;
	*ra_at = w.ra_at;
	*bp_at = w.bp_at;
	return r;
}

/*
 * Two loops: the first walks the capture's own frames to the anchor and
 * drops `skip` more, the second stores every frame, with nothing but the
 * step and the end of pcs to watch.
 */
__attribute__((no_sanitize_address)) TFA_NOINLINE int
tfa_cfi_capture(uintptr_t frame, uintptr_t anchor, unsigned search, uintptr_t *pcs, unsigned max,
		unsigned skip, unsigned limit, uintptr_t stack_end)
{
	const uintptr_t fp = frame;
	slot_t *table = __atomic_load_n(&slots, __ATOMIC_ACQUIRE);
	uint64_t gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
	/* Read once: a walk that misses a doubling still finds its keys below the old size. */
	const uintptr_t mask4 = (uintptr_t)__atomic_load_n(&cache_mask, __ATOMIC_ACQUIRE) << 2;
	const uintptr_t lo = fp;
	unsigned seen = 0;
	uintptr_t unused_slot, unused_ra_at, unused_bp_at;
	int r;

	/* fp is 16-aligned by the ABI: never refused for it in practice. */
	if (tfa_unlikely(table == NULL || max == 0 || limit == 0 || stack_end <= fp + 16
			 || (fp & 7) != 0))
		return refuse();
	const uintptr_t *record = (const uintptr_t *)fp;
	uintptr_t pc = record[1], sp = fp + 16, bp = record[0];

	if (pc == 0)
		return 0; /* as libunwind: a zero return address ends the stack */
	if (tfa_unlikely(pc < TFA_PC_MIN))
		return refuse();
	/* The frames before the anchor are the capture's own; then `skip` more. */
	for (bool anchored = false;;) {
		if (!anchored && pc == anchor)
			anchored = true;
		if (anchored) {
			if (skip == 0)
				break;
			skip--;
		} else if (seen >= search) {
			return 0;
		}
		if (++seen == limit)
			return 0;
		r = fast_step(table, mask4, gen, stack_end, &pc, &sp, &bp, &unused_slot);
		if (r == STEP_ON)
			r = pc == 0 ? STEP_END : pc < TFA_PC_MIN ? STEP_REFUSE : STEP_ON;
		else if (r == STEP_SLOW)
			r = slow_step_regs(table, mask4, gen, lo, stack_end, &pc, &sp, &bp, &unused_ra_at,
					   &unused_bp_at);
		if (r == STEP_END)
			return 0;
		if (tfa_unlikely(r == STEP_REFUSE))
			return refuse();
	}

	uintptr_t *out = pcs;
	uintptr_t *const out_end = pcs + TFA_MIN(max, limit - seen);
	for (;;) {
		*out++ = pc;
		if (out == out_end)
			break;
		r = fast_step(table, mask4, gen, stack_end, &pc, &sp, &bp, &unused_slot);
		if (tfa_likely(r == STEP_ON)) {
			if (tfa_likely(pc >= TFA_PC_MIN))
				continue;
			r = pc == 0 ? STEP_END : STEP_REFUSE;
		} else if (r == STEP_SLOW) {
			r = slow_step_regs(table, mask4, gen, lo, stack_end, &pc, &sp, &bp, &unused_ra_at,
					   &unused_bp_at);
		}
		if (r == STEP_END)
			break;
		if (tfa_unlikely(r == STEP_REFUSE))
			return refuse();
	}
	return (int)(out - pcs);
}

/* ---- the walk with the thread's last one (core/stack_cache.h) ------------------------------- */

/*
 * One level, field by field: as a struct assignment, gcc (without SLP
 * vectorization, TFA_SHIM_FLAGS) made each 56-byte copy a `rep movsl`,
 * whose start-up cost was 39% of this file's samples on sqlite3 with full
 * stacks.
 */
static TFA_ALWAYS_INLINE void
level_copy(tfa_stack_level_t *dst, const tfa_stack_level_t *src)
{
	dst->pc = src->pc;
	dst->sp = src->sp;
	dst->bp = src->bp;
	dst->ra_at = src->ra_at;
	dst->ra = src->ra;
	dst->bp_at = src->bp_at;
	dst->bp_read = src->bp_read;
}

/*
 * Whether the stack still holds the last walk's levels from position m
 * outwards: each step read the words it read then (see
 * core/stack_cache.h).  Returns -1 when it does; else the first position,
 * from m outwards, whose step read differently (or cannot be checked): no
 * match at or beyond it can hold either.  From the level itself outwards,
 * stopping at the first change: a level is read only when the one inside it
 * was found unchanged, so that its words are frame slots of the current
 * stack, the words the walk without the cache would read.  (One pass over
 * every level without a branch read the kept addresses of levels beyond a
 * change: on a stack reused since, as a coroutine's, they can lie in a page
 * unmapped meanwhile.)  REQUIRES: level m is the current walk's.
 */
__attribute__((no_sanitize_address)) static TFA_ALWAYS_INLINE int
outer_changed_at(const tfa_stack_cache_t *c, int m)
{
	/*
	 * The level itself first is where the walks nearly always differ when
	 * they do (a function called again at the same depth from another
	 * place: the same %rsp and return address into it, another return
	 * address out of it).
	 */
	for (int p = m; p >= 0; p--) {
		const tfa_stack_level_t *l = &c->lv[p];
		if (*(const uintptr_t *)l->ra_at != l->ra || *(const uintptr_t *)l->bp_at != l->bp_read)
			return p;
	}
	return -1;
}

/*
 * Walks as tfa_cfi_capture does, but against the thread's last walk (see
 * core/stack_cache.h), and leaves the stack in the cache.  Positions the two
 * walks share keep their levels (and the stack table's figures for them);
 * the walk stops at the first level equal to one of the last walk's whose
 * outer words are unchanged.
 */
__attribute__((no_sanitize_address)) TFA_NOINLINE int
tfa_cfi_capture_cached(uintptr_t frame, uintptr_t anchor, unsigned search, uintptr_t self_lo,
		       uintptr_t self_hi, uintptr_t stack_end, tfa_stack_cache_t *c)
{
	const uintptr_t fp = frame;
	slot_t *table = __atomic_load_n(&slots, __ATOMIC_ACQUIRE);
	uint64_t gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
	const uintptr_t mask4 = (uintptr_t)__atomic_load_n(&cache_mask, __ATOMIC_ACQUIRE) << 2;
	const uintptr_t lo = fp;
	tfa_stack_level_t *scratch = c->scratch;
	const uintptr_t nothing_read = (uintptr_t)&c->zero;
	uintptr_t slot, top, ra_at, bp_at;
	unsigned seen = 0, fresh = 0;
	int r, m = -1;

	if (tfa_unlikely(table == NULL || stack_end <= fp + 16 || (fp & 7) != 0))
		goto refused;
	const uintptr_t *record = (const uintptr_t *)fp;
	uintptr_t pc = record[1], sp = fp + 16, bp = record[0];

	/* To the anchor, then past the shim's own frames: as tfa_cfi_capture, then capture_stack. */
	c->n_self = 0;
	for (;;) {
		if (pc == 0)
			goto empty;
		if (tfa_unlikely(pc < TFA_PC_MIN))
			goto refused;
		if (pc == anchor) {
			if (pc < self_lo || pc >= self_hi)
				break;
			anchor = 0; /* found: what follows is the shim's frames, then the program's */
		}
		if (anchor != 0) {
			if (seen++ >= search)
				goto empty;
		} else if (pc >= self_lo && pc < self_hi) {
			if (c->n_self == TFA_STACK_CACHE_SELF_MAX)
				goto not_served;
			c->self_pcs[c->n_self++] = pc;
		} else {
			break;
		}
		r = fast_step(table, mask4, gen, stack_end, &pc, &sp, &bp, &slot);
		if (r == STEP_SLOW)
			r = slow_step_regs(table, mask4, gen, lo, stack_end, &pc, &sp, &bp, &ra_at, &bp_at);
		else if (r == STEP_ON && pc == 0)
			r = STEP_END;
		if (r == STEP_END)
			goto empty;
		if (r == STEP_REFUSE)
			goto refused;
	}

	c->zero = 0;
	if (c->len != 0 && c->gen == gen && c->top <= stack_end)
		m = (int)c->len - 1;
	for (;;) {
		if (m >= 0) {
			/* Stacks grow down: the last walk's levels below sp cannot be this one. */
			while (m >= 0 && c->lv[m].sp < sp)
				m--;
			if (m >= 0 && c->lv[m].sp == sp && c->lv[m].pc == pc && c->lv[m].bp == bp) {
				int changed = outer_changed_at(c, m);
				if (changed < 0)
					goto matched;
				m = changed - 1;
			}
		}
		if (tfa_unlikely(fresh == TFA_STACK_CACHE_LEVELS))
			goto not_served;
		tfa_stack_level_t *l = &scratch[fresh++];
		l->pc = pc;
		l->sp = sp;
		l->bp = bp;
		r = fast_step(table, mask4, gen, stack_end, &pc, &sp, &bp, &slot);
		if (tfa_likely(r == STEP_ON)) {
			/* The caller's return address at its CFA - 8, and its %rbp (or that word again). */
			l->ra_at = sp - 8;
			l->ra = pc;
			l->bp_at = slot != 0 ? slot : sp - 8;
			l->bp_read = slot != 0 ? bp : pc;
			if (tfa_likely(pc >= TFA_PC_MIN))
				continue;
			if (pc != 0)
				goto refused;
			top = sp; /* ended by a zero return address, read at sp - 8 */
			break;
		}
		l->ra_at = nothing_read;
		l->bp_at = nothing_read;
		l->ra = 0;
		l->bp_read = 0;
		if (r == STEP_END) {
			top = l->sp; /* the outermost frame by its rule: nothing read */
			break;
		}
		r = slow_step_regs(table, mask4, gen, lo, stack_end, &pc, &sp, &bp, &ra_at, &bp_at);
		if (r == STEP_REFUSE)
			goto refused;
		if (ra_at == 0) {
			top = l->sp; /* the outermost frame by its rule */
			break;
		}
		/*
		 * Read within the frame, as the fast step's: the checks then stay
		 * between the walk's start and its end.  Elsewhere (a rule the
		 * compilers do not write), never taken for checked.
		 */
		if (ra_at >= l->sp && ra_at < sp && (bp_at == 0 || (bp_at >= l->sp && bp_at < sp))) {
			l->ra_at = ra_at;
			l->ra = pc;
			l->bp_at = bp_at != 0 ? bp_at : ra_at;
			l->bp_read = bp_at != 0 ? bp : pc;
		} else {
			l->ra = 1; /* never what the zero word holds */
		}
		if (r == STEP_ON)
			continue;
		top = sp; /* a zero return address (pc), read within the frame */
		break;
	}
	/* The stack's end: every level is new. */
	for (unsigned i = 0; i < fresh; i++)
		level_copy(&c->lv[fresh - 1 - i], &scratch[i]);
	c->len = fresh;
	c->fresh = fresh;
	c->hashed = 0;
	c->known = 0;
	c->gen = (uint32_t)gen;
	c->top = top;
	return (int)fresh;

matched: {
	/* Positions [0, m] stay; the new levels go inside them. */
	unsigned len = (unsigned)m + 1 + fresh;
	if (tfa_unlikely(len > TFA_STACK_CACHE_LEVELS))
		goto not_served;
	for (unsigned i = 0; i < fresh; i++)
		level_copy(&c->lv[len - 1 - i], &scratch[i]);
	c->len = len;
	c->fresh = fresh;
	c->hashed = TFA_MIN(c->hashed, (uint32_t)m + 1);
	c->known = TFA_MIN(c->known, (uint32_t)m + 1);
	return (int)len;
}
empty:
	c->len = 0;
	return 0;
not_served:
	c->len = 0;
	return -2;
refused:
	c->len = 0;
	return refuse();
}

/* ---- interface ---------------------------------------------------------------------------- */

int
tfa_cfi_init(void)
{
	if (__atomic_load_n(&slots, __ATOMIC_ACQUIRE) != NULL)
		return 0;
	slot_t *table = tfa_arena_map(RULES_RESERVE);
	if (table == NULL)
		return -ENOMEM;
	slot_t *expected = NULL;
	if (!__atomic_compare_exchange_n(&slots, &expected, table, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		tfa_arena_unmap(table, RULES_RESERVE);
	return 0;
}

void
tfa_cfi_flush(void)
{
	uint32_t gen = __atomic_load_n(&generation, __ATOMIC_RELAXED), next;

	do {
		next = (gen + 1) & GEN_MASK;
		if (next == 0)
			next = 1;
	} while (!__atomic_compare_exchange_n(&generation, &gen, next, true, __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
}

uint64_t
tfa_cfi_refusals(void)
{
	return __atomic_load_n(&refusals, __ATOMIC_RELAXED);
}

uint64_t
tfa_cfi_rules_computed(void)
{
	return __atomic_load_n(&rules_computed, __ATOMIC_RELAXED);
}

void
tfa_cfi_cache_info(tfa_cfi_cache_info_t *out)
{
	out->table = __atomic_load_n(&slots, __ATOMIC_ACQUIRE);
	out->reserved_bytes = RULES_RESERVE;
	out->slots = __atomic_load_n(&cache_mask, __ATOMIC_ACQUIRE) + 1;
	out->min_slots = RULES_SLOTS_MIN;
	out->keys = __atomic_load_n(&cache_keys, __ATOMIC_RELAXED);
}

int
tfa_cfi_test_outer_changed(const tfa_stack_cache_t *c, int m)
{
	return outer_changed_at(c, m);
}

uint64_t
tfa_cfi_test_rule(uintptr_t ra, bool cached)
{
	slot_t *table = __atomic_load_n(&slots, __ATOMIC_ACQUIRE);
	uint32_t gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
	bool cacheable;

	if (cached && table != NULL)
		return rule_of(table, __atomic_load_n(&cache_mask, __ATOMIC_ACQUIRE), ra, gen);
	return compute_rule(ra - 1, gen, &cacheable);
}
