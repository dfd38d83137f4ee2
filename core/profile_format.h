/* SPDX-License-Identifier: MIT */
/*
 * The profile file: what one process leaves behind, written by the shim
 * (core/profile_write.c, without malloc) and read by the tools
 * (core/profile_read.c).
 *
 * Layout, all integers little-endian:
 *
 *   header   8 bytes magic "TFAPROF\0", u32 format version (2), u32 header
 *            size (16).
 *   records  u32 type, u32 payload length (<= TFA_PROF_MAX_RECORD), the
 *            payload, u32 CRC-32 (IEEE, as zlib's crc32) of type, length and
 *            payload.  Readers skip record types they do not know.
 *   end      a TFA_REC_END record; a file without one was cut short.
 *
 * Payload building blocks: u32, u64, i64; a string is a u32 length then that
 * many bytes (no NUL); a "counts" block is a u32 n then n u64 values, read as
 * far as the reader knows the fields and extended only at the end, so older
 * readers keep working.
 */
#ifndef TFA_CORE_PROFILE_FORMAT_H
#define TFA_CORE_PROFILE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define TFA_PROF_MAGIC       "TFAPROF"   /* 8 bytes with its NUL */
/*
 * 2: the stack table's trie and packed sites (TFA_REC_STACK_NODES, _LEAVES,
 * TFA_REC_SITES).  A reader of version 1 would skip those records as a
 * later format's and show its reports without stacks or sites: it refuses
 * the file instead, by its version.  Readers read both.
 */
#define TFA_PROF_VERSION     2u
#define TFA_PROF_VERSION_MIN 1u
#define TFA_PROF_HEADER_SIZE 16u
#define TFA_PROF_MAX_RECORD  (16u << 20)
#define TFA_PROF_MAX_STRING  4096u

enum tfa_prof_record_type_e {
	/*
	 * u32 pid, u32 ppid, u64 start_ns, u64 end_ns (CLOCK_REALTIME; end 0
	 * while running), u32 end_reason, i32 exit_code, u32 flags,
	 * str command (argv joined by spaces), str exe, str comm,
	 * str tfalloc_version.
	 */
	TFA_REC_PROCESS = 1,
	/* str device ("cpu"), str allocator (the backend's name), counts (enum tfa_prof_device_field_e). */
	TFA_REC_DEVICE = 2,
	/*
	 * str device, u32 stack_id, u32 leak_kind (enum tfa_prof_leak_kind_e),
	 * counts (enum tfa_prof_leak_field_e).  One record per group of leaked
	 * blocks sharing device, stack and kind.
	 */
	TFA_REC_LEAK = 3,
	/*
	 * u32 error kind (enum tfa_prof_error_kind_e), u64 address, u32 stack_id
	 * of the offending call, u32 stack_id of the allocation (0: none),
	 * u64 count (times this address was hit), str detail.
	 */
	TFA_REC_ERROR = 4,
	/* counts (enum tfa_prof_error_count_e): totals, shown rows may be capped. */
	TFA_REC_ERROR_TOTALS = 5,
	/*
	 * How stacks were recorded: u32 stacks mode (enum tfa_prof_stacks_mode_e),
	 * u32 frames kept per stack at most, u64 sample_bytes (mean interval of
	 * sampled stacks; 0: every allocation has its stack); then (absent in
	 * older files) u64 truncated (allocations whose new stack came when the
	 * table was full and kept its innermost frames only), u32 max_stacks;
	 * then (absent in older files) what the shim mapped for its tables: u64
	 * pointer table bytes, u64 stack table bytes (the stacks, their index and
	 * the sites' figures); then (absent in older files) u32 track (enum
	 * tfa_prof_track_e: 1, sample-only tracking, TFALLOC_TRACK=sampled: only
	 * the blocks with a sampled stack were recorded, so the leak records are
	 * those live at exit, estimated; the device's bytes in use count the
	 * unsampled blocks at their allocated size; sample_bytes is not 0 and the
	 * stacks mode not none); then (absent in older files) u64 the most bytes
	 * the pointer table had mapped at once (its shards shrink).
	 */
	TFA_REC_CONFIG = 6,
	/*
	 * One ELF object the process had mapped: u64 bias (ELF vaddr + bias =
	 * address), u64 start, u64 end (its PT_LOAD range), u32 seen_at, u32
	 * gone_at, str path, str build id (raw bytes).  The module held its range
	 * for the stacks with seen_at < id <= gone_at (gone_at UINT32_MAX while
	 * loaded at the end).
	 */
	TFA_REC_MODULE = 7,
	/*
	 * Stacks of the stack table, several per record, up to the end of the
	 * payload: { u32 id, u32 depth, depth u64 return addresses, innermost
	 * first }.
	 */
	TFA_REC_STACKS = 8,
	/*
	 * str device, u32 stack_id, counts (enum tfa_prof_site_field_e): what the
	 * allocations made with this stack did.  With sampling, the figures of the
	 * sampled allocations only (a reader scales them).
	 */
	TFA_REC_SITE = 9,
	/*
	 * Memory over time (core/timeline.h), several records in order: u64
	 * interval_ns (the least spacing of the points at the end), then points
	 * up to the end of the payload: { u64 t_ns (since the series started,
	 * when the shim did), u64 bytes_in_use, u64 allocated_bytes, u64
	 * rss_bytes, u32 flags (enum tfa_timeline_flag_e: 1 the peak) }.
	 */
	TFA_REC_TIMELINE = 10,
	/*
	 * A resource of the control API (core/resource_mgr.h): u32 tag, u32 state
	 * (enum tfa_res_state_e: 1 live, 2 deleted), u32 refcount, u64 type hash,
	 * str container, str type, str name, str debug string, counts (enum
	 * tfa_prof_resource_field_e), then for each device something was charged
	 * on, up to the end of the payload: { str device, counts (enum
	 * tfa_prof_res_device_field_e) }.
	 */
	TFA_REC_RESOURCE = 11,
	/*
	 * A container cleaned up while blocks charged to its resources were live
	 * (the scoped leak check): u64 t_ns (since the process started), str
	 * container, counts (enum tfa_prof_cleanup_field_e), then up to the end of
	 * the payload groups of those blocks: { u32 tag, u32 stack_id, u64 blocks,
	 * u64 bytes, u64 sample_address }.
	 */
	TFA_REC_CLEANUP = 12,
	/*
	 * Memory over time of a device other than cpu (core/devices.h), several
	 * records per device in order: str device, u64 interval_ns, then points
	 * as TFA_REC_TIMELINE's (t_ns since the process's series started; rss 0).
	 */
	TFA_REC_DEVICE_TIMELINE = 13,
	/*
	 * The stack table's trie of outer frames (core/stack_table.h), several
	 * records in order: u32 number of the payload's first node (1, then one
	 * past the last record's), then nodes numbered on from it, up to the end
	 * of the payload: { uleb128 back, uleb128 zigzag pc delta }.  A node's
	 * parent, its next outer frame, is node (number - back), back in 1 ..
	 * number (number: an outermost frame, parent 0); its return address is
	 * its parent's (0 for none) plus the delta, modulo 2^64.  zigzag: a
	 * signed delta d as (d << 1) ^ (d >> 63).  Written instead of
	 * TFA_REC_STACKS (which readers still read): the stacks of a program
	 * share most of their frames, written once here (python3 installing
	 * with pip: 43.1 MB of stacks as TFA_REC_STACKS, 3.5 MB as these).
	 */
	TFA_REC_STACK_NODES = 14,
	/* u64 records before this one, u32 complete (1: written at the end of the process). */
	TFA_REC_END = 15,
	/*
	 * Stacks over TFA_REC_STACK_NODES (which come first), several records in
	 * order: u32 id of the payload's first stack, then stacks with ids
	 * counting on from it, up to the end of the payload: { uleb128 node of
	 * the next outer frame (0: a stack of one frame), uleb128 zigzag delta of
	 * the innermost return address from that node's }.  The stack's frames
	 * are its innermost and the node's chain to the root.
	 */
	TFA_REC_STACK_LEAVES = 16,
	/*
	 * TFA_REC_SITE's figures for many sites: str device, then sites up to
	 * the end of the payload, by rising stack id: { uleb128 stack id less
	 * the previous site's of the record (0 before the first), uleb128 n,
	 * n uleb128 counts (enum tfa_prof_site_field_e) }.  Written instead of
	 * one TFA_REC_SITE a site: 67 bytes a site there, about 10 here.
	 */
	TFA_REC_SITES = 17,
};

enum tfa_prof_end_reason_e {
	TFA_END_RUNNING = 0, /* a snapshot of a live process */
	TFA_END_EXIT = 1,    /* exit_code: the status passed to exit() */
	TFA_END_SIGNAL = 2,  /* exit_code: the signal number */
	TFA_END_EXEC = 3,    /* the image was replaced by exec */
	TFA_END_UNKNOWN = 4, /* ended without telling how (a library destructor ran) */
};

#define TFA_PROC_FLAG_FORKED    (1u << 0) /* a fork child: inherited its parent's heap */
#define TFA_PROC_FLAG_DEGRADED  (1u << 1) /* the shim ran out of memory and stopped recording */
#define TFA_PROC_FLAG_STACKS_LOST (1u << 2) /* no memory for new call stacks: later ones are missing */

enum tfa_prof_device_field_e {
	TFA_DEV_NUM_ALLOCS = 0,
	TFA_DEV_NUM_FREES,
	TFA_DEV_NUM_REALLOCS,
	TFA_DEV_BYTES_IN_USE,
	TFA_DEV_PEAK_BYTES_IN_USE,
	TFA_DEV_LARGEST_ALLOC_SIZE,
	TFA_DEV_TOTAL_BYTES,
	TFA_DEV_BYTES_LIMIT,
	TFA_DEV_ALLOCATED_BYTES_IN_USE,
	TFA_DEV_PEAK_ALLOCATED_BYTES_IN_USE,
	TFA_DEV_TOTAL_ALLOCATED_BYTES,
	TFA_DEV_SHIM_OVERHEAD_BYTES, /* memory the shim mapped for itself */
	TFA_DEV_PEAK_BLOCKS_IN_USE,  /* most blocks live at once (0 in older files: not known) */
	/*
	 * Bytes the leak classification read at exit (the roots and the blocks
	 * it scanned, memcheck's "checked N bytes"); 0: no scan (none asked
	 * for, nothing live to classify, or not the cpu device).
	 */
	TFA_DEV_LEAK_SCAN_BYTES,
	TFA_DEV_FIELD_COUNT
};

enum tfa_prof_track_e {
	TFA_PROF_TRACK_ALL = 0,     /* every live block was recorded */
	TFA_PROF_TRACK_SAMPLED = 1, /* only the sampled ones (TFALLOC_TRACK=sampled) */
};

/*
 * What one sampled block of size bytes stands for in sample-only tracking at
 * a mean interval of `interval` bytes: 1 / (1 - exp(-size / interval)), the
 * inverse of its chance to be sampled (jemalloc's heap profiler's scaling);
 * a size of 0 counts as 1 byte; 1 when interval is 0.  Its bytes: size
 * times that.
 */
double tfa_sample_weight(uint64_t size, uint64_t interval);

enum tfa_prof_stacks_mode_e {
	TFA_PROF_STACKS_NONE = 0,
	TFA_PROF_STACKS_FP = 1,
	TFA_PROF_STACKS_UNWIND = 2,
};

#define TFA_PROF_GONE_NEVER UINT32_MAX

enum tfa_prof_site_field_e {
	TFA_SITEF_NUM_ALLOCS = 0,
	TFA_SITEF_TOTAL_BYTES,
	TFA_SITEF_BYTES_IN_USE,
	TFA_SITEF_BLOCKS_IN_USE,
	TFA_SITEF_BYTES_AT_PEAK,
	TFA_SITEF_FIELD_COUNT
};

enum tfa_prof_leak_kind_e {
	TFA_LEAK_UNCLASSIFIED = 0, /* live at exit; reachability not analysed */
	TFA_LEAK_DEFINITE = 1,
	TFA_LEAK_INDIRECT = 2,
	TFA_LEAK_POSSIBLE = 3,
	TFA_LEAK_REACHABLE = 4,
};

enum tfa_prof_leak_field_e {
	TFA_LEAKF_BYTES = 0,     /* requested bytes */
	TFA_LEAKF_BLOCKS,
	TFA_LEAKF_ALLOCATED_BYTES,
	TFA_LEAKF_SAMPLE_ADDRESS, /* one of the blocks */
	TFA_LEAKF_RESOURCE,       /* the resource tag they were charged to (TFA_REC_RESOURCE); 0: none */
	/*
	 * Sample-only tracking (CONFIG track 1): the group's blocks stand for
	 * this many bytes and blocks, each sampled block of s bytes for
	 * s / (1 - exp(-s / sample_bytes)) bytes and 1 / (1 - exp(-s /
	 * sample_bytes)) blocks (tfa_sample_weight), rounded; 0 otherwise (and in
	 * older files).
	 */
	TFA_LEAKF_EST_BYTES,
	TFA_LEAKF_EST_BLOCKS,
	TFA_LEAKF_FIELD_COUNT
};

enum tfa_prof_resource_field_e {
	TFA_RESF_BYTES_LIMIT = 0, /* 0: none */
	TFA_RESF_MEMORY_USED,     /* requested bytes in use on every device */
	TFA_RESF_PEAK_MEMORY_USED,
	TFA_RESF_FIELD_COUNT
};

/* A resource's figures on one device: the device figures' names (tfa_prof_res_device_field_name). */
enum tfa_prof_res_device_field_e {
	TFA_RESD_NUM_ALLOCS = 0,
	TFA_RESD_NUM_FREES,
	TFA_RESD_BYTES_IN_USE,
	TFA_RESD_PEAK_BYTES_IN_USE,
	TFA_RESD_LARGEST_ALLOC_SIZE,
	TFA_RESD_TOTAL_BYTES,
	TFA_RESD_ALLOCATED_BYTES_IN_USE,
	TFA_RESD_PEAK_ALLOCATED_BYTES_IN_USE,
	TFA_RESD_TOTAL_ALLOCATED_BYTES,
	TFA_RESD_FIELD_COUNT
};

enum tfa_prof_cleanup_field_e {
	TFA_CLEANF_BLOCKS = 0,
	TFA_CLEANF_BYTES,
	TFA_CLEANF_RESOURCES,      /* resources the cleanup deleted */
	TFA_CLEANF_GROUPS_DROPPED, /* groups of blocks not written (the record is full) */
	TFA_CLEANF_FIELD_COUNT
};

enum tfa_prof_error_kind_e {
	TFA_ERR_DOUBLE_FREE = 1,
	TFA_ERR_INVALID_FREE = 2,
	TFA_ERR_MISMATCHED_FREE = 3,
};

enum tfa_prof_error_count_e {
	TFA_ERRC_DOUBLE_FREE = 0,
	TFA_ERRC_INVALID_FREE,
	TFA_ERRC_MISMATCHED_FREE,
	TFA_ERRC_NOT_RECORDED, /* errors beyond the recorded rows */
	TFA_ERRC_FIELD_COUNT
};

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32()); start with crc = 0. */
uint32_t tfa_crc32(uint32_t crc, const void *data, size_t len);

/* "double_free", "invalid_free", "mismatched_free", or "unknown". */
const char *tfa_prof_error_kind_name(uint32_t kind);
/* "unclassified", "definite", "indirect", "possible", "reachable", or "unknown". */
const char *tfa_prof_leak_kind_name(uint32_t kind);
/* The JSON key of a device figure (enum tfa_prof_device_field_e): "num_allocs", ...; "unknown". */
const char *tfa_prof_device_field_name(unsigned field);
/* The JSON key of an error count (enum tfa_prof_error_count_e): "double_free", ...; "unknown". */
const char *tfa_prof_error_count_name(unsigned field);
/* The JSON key of a resource's device figure (enum tfa_prof_res_device_field_e); "unknown". */
const char *tfa_prof_res_device_field_name(unsigned field);
/* "live", "deleted", or "unknown". */
const char *tfa_prof_resource_state_name(uint32_t state);
/* "none", "fp", "unwind", or "unknown". */
const char *tfa_prof_stacks_mode_name(uint32_t mode);
/* "running", "exit", "signal", "exec", "unknown". */
const char *tfa_prof_end_reason_name(uint32_t reason);

#endif /* TFA_CORE_PROFILE_FORMAT_H */
