/* SPDX-License-Identifier: MIT */
/*
 * The reader of profile files (core/profile_format.h): for the tools and the
 * tests only.  It uses malloc and stdio freely and is never linked into the
 * shim.
 *
 * The reader trusts nothing in a file: every length is checked against the
 * bytes that remain, TFA_PROF_MAX_RECORD and TFA_PROF_MAX_STRING; every
 * record's CRC-32 is checked; the memory it takes is bounded by a small
 * multiple of the file's size, and files larger than TFA_PROFILE_MAX_FILE are
 * refused.  Unknown record types are skipped, and "counts" blocks may have
 * more fields (ignored) or fewer (missing ones read as 0) than this reader
 * knows.  Bytes after the last known field of a known record are ignored
 * (room for fields a later writer appends).
 *
 * A valid file has exactly one PROCESS record, at most one ERROR_TOTALS
 * record, and ends with an END record whose count of earlier records is
 * right, with nothing after it.  An END record with complete = 0 is a valid
 * snapshot of a process that was still running.
 */
#ifndef TFA_CORE_PROFILE_READ_H
#define TFA_CORE_PROFILE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/profile_format.h"

/* Larger files are refused with a clear error instead of being read into memory. */
#define TFA_PROFILE_MAX_FILE ((uint64_t)1 << 30)

/* One DEVICE record. */
typedef struct tfa_profile_device_s {
	char *name;                      /* "cpu" */
	char *allocator;                 /* the backend's registry name */
	uint64_t f[TFA_DEV_FIELD_COUNT]; /* by enum tfa_prof_device_field_e */
	uint32_t nfields; /* of f, those the file had (older files: fewer; the rest are 0) */
} tfa_profile_device_t;

/*
 * The device figures every reader has shown, as 0 when a file lacks them;
 * later ones are shown only when the file has them (a 0 would be a claim).
 */
#define TFA_DEV_FIELDS_ALWAYS TFA_DEV_PEAK_BLOCKS_IN_USE

static inline uint32_t
tfa_profile_device_fields_shown(const tfa_profile_device_t *d)
{
	return d->nfields > TFA_DEV_FIELDS_ALWAYS ? d->nfields : TFA_DEV_FIELDS_ALWAYS;
}

/* One LEAK record: a group of blocks sharing device, stack and kind. */
typedef struct tfa_profile_leak_s {
	char *device;
	uint32_t stack_id;                 /* 0: no stack recorded */
	uint32_t kind;                     /* enum tfa_prof_leak_kind_e */
	uint64_t f[TFA_LEAKF_FIELD_COUNT]; /* by enum tfa_prof_leak_field_e */
} tfa_profile_leak_t;

/* One ERROR record. */
typedef struct tfa_profile_error_s {
	uint32_t kind; /* enum tfa_prof_error_kind_e */
	uint64_t address;
	uint32_t stack_id;       /* of the offending call; 0: none */
	uint32_t alloc_stack_id; /* of the allocation; 0: none */
	uint64_t count;          /* times this address was hit */
	char *detail;
} tfa_profile_error_t;

/* One MODULE record: an ELF object the process had mapped. */
typedef struct tfa_profile_module_s {
	char *path;
	uint64_t bias, start, end;
	uint32_t seen_at, gone_at; /* held its range for stacks seen_at < id <= gone_at */
	uint8_t *build_id;         /* NULL when none */
	uint32_t build_id_len;
} tfa_profile_module_t;

/* One stack of the STACKS records; its return addresses are pcs[first .. first + depth). */
typedef struct tfa_profile_stack_s {
	uint32_t id;
	uint32_t depth;
	size_t first;
} tfa_profile_stack_t;

/* One point of the TIMELINE records. */
typedef struct tfa_profile_point_s {
	uint64_t t_ns; /* since the process's series started */
	uint64_t bytes_in_use;
	uint64_t allocated_bytes;
	uint64_t rss_bytes;
	uint32_t flags; /* 1: the peak (its time known to one interval) */
} tfa_profile_point_t;

/* A device's memory over time (DEVICE_TIMELINE records): its points in dev_points. */
typedef struct tfa_profile_dev_timeline_s {
	char *device;
	uint64_t interval_ns;
	size_t first; /* index in dev_points */
	size_t n;
} tfa_profile_dev_timeline_t;

/* One SITE record. */
typedef struct tfa_profile_site_s {
	char *device;
	uint32_t stack_id;
	uint64_t f[TFA_SITEF_FIELD_COUNT]; /* by enum tfa_prof_site_field_e */
} tfa_profile_site_t;

/* A resource's figures on one device (RESOURCE records). */
typedef struct tfa_profile_res_device_s {
	char *device;
	uint64_t f[TFA_RESD_FIELD_COUNT]; /* by enum tfa_prof_res_device_field_e */
} tfa_profile_res_device_t;

/* One RESOURCE record; its devices are res_devices[first .. first + ndevices). */
typedef struct tfa_profile_resource_s {
	uint32_t tag;
	uint32_t state; /* 1 live, 2 deleted */
	uint32_t refcount;
	uint64_t type_hash;
	char *container;
	char *type;
	char *name;
	char *debug;
	uint64_t f[TFA_RESF_FIELD_COUNT]; /* by enum tfa_prof_resource_field_e */
	size_t first;
	size_t ndevices;
} tfa_profile_resource_t;

/* A group of the blocks a cleanup found live. */
typedef struct tfa_profile_cleanup_group_s {
	uint32_t tag;
	uint32_t stack_id;
	uint64_t blocks;
	uint64_t bytes;
	uint64_t sample_address;
} tfa_profile_cleanup_group_t;

/* One CLEANUP record; its groups are cleanup_groups[first .. first + ngroups). */
typedef struct tfa_profile_cleanup_s {
	uint64_t t_ns; /* CLOCK_REALTIME */
	char *container;
	uint64_t f[TFA_CLEANF_FIELD_COUNT]; /* by enum tfa_prof_cleanup_field_e */
	size_t first;
	size_t ngroups;
} tfa_profile_cleanup_t;

struct tfa_profile_strings;

/*
 * A parsed profile.  Every string is NUL-terminated and never NULL after a
 * successful parse; a string that contained a NUL byte reads up to it.
 */
typedef struct tfa_profile_s {
	char *path;       /* the name given to the parser */
	uint32_t version; /* of the format */

	/* PROCESS */
	bool has_process; /* always true after a successful parse */
	uint32_t pid;
	uint32_t ppid;
	uint64_t start_ns;   /* CLOCK_REALTIME */
	uint64_t end_ns;     /* 0: still running when written */
	uint32_t end_reason; /* enum tfa_prof_end_reason_e */
	int32_t exit_code;   /* exit status, or the signal for TFA_END_SIGNAL */
	uint32_t flags;      /* TFA_PROC_FLAG_* */
	char *command;
	char *exe;
	char *comm;
	char *tfalloc_version;

	tfa_profile_device_t *devices;
	size_t ndevices;
	tfa_profile_leak_t *leaks;
	size_t nleaks;
	tfa_profile_error_t *errors;
	size_t nerrors;
	bool has_error_totals;
	uint64_t error_totals[TFA_ERRC_FIELD_COUNT]; /* by enum tfa_prof_error_count_e */

	/* CONFIG: absent in profiles of tfalloc without stacks */
	bool has_config;
	uint32_t stacks_mode;  /* enum tfa_prof_stacks_mode_e */
	uint32_t stack_depth;  /* frames kept per stack at most */
	uint64_t sample_bytes; /* 0: every allocation has its stack */
	uint64_t stacks_truncated; /* allocations with a truncated stack: the table was full */
	uint32_t max_stacks;       /* the table's limit of whole stacks; 0: unknown */
	uint64_t pointer_table_bytes; /* mapped for the pointer table at the end; 0: unknown */
	uint64_t stack_table_bytes;   /* mapped for stacks, their index and the sites; 0: unknown */
	uint32_t track;               /* enum tfa_prof_track_e; TFA_PROF_TRACK_ALL in older files */
	uint64_t pointer_table_peak_bytes; /* the most mapped for it at once (shards shrink); 0: unknown */

	tfa_profile_module_t *modules; /* in the order of discovery */
	size_t nmodules;
	tfa_profile_stack_t *stacks; /* sorted by id, ids unique */
	size_t nstacks;
	uint64_t *pcs;
	size_t npcs;
	tfa_profile_site_t *sites;
	size_t nsites;
	tfa_profile_resource_t *resources; /* in tag order */
	size_t nresources;
	tfa_profile_res_device_t *res_devices;
	size_t nres_devices;
	tfa_profile_cleanup_t *cleanups;
	size_t ncleanups;
	tfa_profile_cleanup_group_t *cleanup_groups;
	size_t ncleanup_groups;
	tfa_profile_point_t *timeline; /* in time order */
	size_t ntimeline;
	uint64_t timeline_interval_ns;
	tfa_profile_dev_timeline_t *dev_timelines; /* devices other than cpu, in file order */
	size_t ndev_timelines;
	tfa_profile_point_t *dev_points;
	size_t ndev_points;

	/* END */
	bool has_end;      /* always true after a successful parse */
	bool complete;     /* false: a snapshot of a running process */
	uint64_t nrecords; /* records before END, unknown types included */

	struct tfa_profile_strings *strings_; /* private: owns every string above */
} tfa_profile_t;

/*
 * Parses a whole profile held in memory.  name is used in messages and copied
 * into out->path.  Returns 0 and fills out (free it with tfa_profile_free), or
 * -1 with out zeroed (nothing to free) and a one-line message in err (when
 * errlen > 0): "NAME: offset N: what is wrong", or "NAME: what is wrong" when
 * no offset applies, or "NAME: out of memory".
 */
int tfa_profile_parse(const uint8_t *data, size_t len, const char *name, tfa_profile_t *out,
                      char *err, size_t errlen);

/*
 * Reads and parses the file at path.  Same results as tfa_profile_parse; a
 * file that cannot be opened or read gives "PATH: strerror", a directory or
 * other non-regular file "PATH: not a regular file", a file larger than
 * TFA_PROFILE_MAX_FILE "PATH: N bytes: larger than ...".
 */
int tfa_profile_read_file(const char *path, tfa_profile_t *out, char *err, size_t errlen);

/* Leaked (live at the end) bytes and blocks charged to the resource of a tag. */
void tfa_profile_resource_leaks(const tfa_profile_t *p, uint32_t tag, uint64_t *bytes, uint64_t *blocks);

/* The resource of a tag; NULL when the profile has none (tag 0, or an older profile). */
const tfa_profile_resource_t *tfa_profile_resource(const tfa_profile_t *p, uint32_t tag);

/*
 * The return addresses of stack id (innermost first) and their number in
 * *depth; NULL (and *depth 0) when the profile has no such stack.
 */
const uint64_t *tfa_profile_stack(const tfa_profile_t *p, uint32_t id, uint32_t *depth);

/*
 * The module that held address pc when stack id was recorded, or NULL:
 * among the modules covering pc, the one whose [seen_at, gone_at) says it
 * was loaded then; failing that, the last one discovered.
 */
const tfa_profile_module_t *tfa_profile_module_at(const tfa_profile_t *p, uint32_t stack_id,
                                                  uint64_t pc);

/*
 * The memory errors of p by count field (enum tfa_prof_error_count_e): the
 * totals record when there is one, else the sum of the rows.  Returns the
 * errors of the three kinds together.
 */
uint64_t tfa_profile_error_sums(const tfa_profile_t *p, uint64_t out[TFA_ERRC_FIELD_COUNT]);

/* Frees everything tfa_profile_parse allocated and zeroes p.  NULL or a zeroed profile: no-op. */
void tfa_profile_free(tfa_profile_t *p);

/*
 * Frees the tables of p (devices, leaks, modules, stacks, sites, timelines,
 * resources, cleanups) and empties them; its strings, errors and scalar
 * fields stay: what a reader of many profiles keeps of one it is done with.
 */
void tfa_profile_free_tables(tfa_profile_t *p);

#endif /* TFA_CORE_PROFILE_READ_H */
