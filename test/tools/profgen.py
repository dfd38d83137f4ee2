# SPDX-License-Identifier: MIT
"""A small encoder of tfalloc profile files, written from core/profile_format.h
independently of the shim's writer (CRC-32 from zlib), for the tests of
`tfalloc report`: valid, truncated and corrupt files."""

import struct
import zlib

MAGIC = b"TFAPROF\0"
VERSION = 1

REC_PROCESS = 1
REC_DEVICE = 2
REC_LEAK = 3
REC_ERROR = 4
REC_ERROR_TOTALS = 5
REC_END = 15

END_RUNNING, END_EXIT, END_SIGNAL, END_EXEC, END_UNKNOWN = range(5)
FLAG_FORKED = 1
FLAG_DEGRADED = 2

DEVICE_FIELDS = [
    "num_allocs", "num_frees", "num_reallocs", "bytes_in_use", "peak_bytes_in_use",
    "largest_alloc_size", "total_bytes", "bytes_limit", "allocated_bytes_in_use",
    "peak_allocated_bytes_in_use", "total_allocated_bytes", "shim_overhead_bytes",
]

LEAK_UNCLASSIFIED, LEAK_DEFINITE, LEAK_INDIRECT, LEAK_POSSIBLE, LEAK_REACHABLE = range(5)
ERR_DOUBLE_FREE, ERR_INVALID_FREE, ERR_MISMATCHED_FREE = 1, 2, 3


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def string(s):
    if isinstance(s, str):
        s = s.encode()
    return u32(len(s)) + s


def counts(values):
    return u32(len(values)) + b"".join(u64(v) for v in values)


def header(version=VERSION, size=16):
    return MAGIC + u32(version) + u32(size)


def record(rtype, payload):
    head = u32(rtype) + u32(len(payload))
    return head + payload + u32(zlib.crc32(head + payload))


def process(pid=100, ppid=1, start_ns=1700000000_000000000, end_ns=1700000001_000000000,
            end_reason=END_EXIT, exit_code=0, flags=0, command="prog", exe="/usr/bin/prog",
            comm="prog", version="0.1.0"):
    return record(REC_PROCESS, u32(pid) + u32(ppid) + u64(start_ns) + u64(end_ns)
                  + u32(end_reason) + u32(exit_code) + u32(flags) + string(command)
                  + string(exe) + string(comm) + string(version))


def device(name="cpu", allocator="jemalloc", values=None, **fields):
    """values: the whole counts list; or fields by name (the others 0)."""
    if values is None:
        values = [fields.get(k, 0) for k in DEVICE_FIELDS]
    return record(REC_DEVICE, string(name) + string(allocator) + counts(values))


def leak(bytes_, blocks, allocated=None, sample=0x1000, device="cpu", stack_id=0,
         kind=LEAK_UNCLASSIFIED):
    if allocated is None:
        allocated = bytes_
    return record(REC_LEAK, string(device) + u32(stack_id) + u32(kind)
                  + counts([bytes_, blocks, allocated, sample]))


def config(mode=1, depth=16, sample_bytes=0, truncated=0, max_stacks=100000, ptr_bytes=0,
           stack_bytes=0, track=None):
    """TFA_REC_CONFIG; track (sample-only tracking: 1) appended when given."""
    payload = (u32(mode) + u32(depth) + u64(sample_bytes) + u64(truncated) + u32(max_stacks)
               + u64(ptr_bytes) + u64(stack_bytes))
    if track is not None:
        payload += u32(track)
    return record(6, payload)


def error(kind, address, count=1, detail="", stack_id=0, alloc_stack_id=0):
    return record(REC_ERROR, u32(kind) + u64(address) + u32(stack_id) + u32(alloc_stack_id)
                  + u64(count) + string(detail))


def error_totals(double=0, invalid=0, mismatched=0, not_recorded=0):
    return record(REC_ERROR_TOTALS, counts([double, invalid, mismatched, not_recorded]))


def end(nrecords, complete=1):
    return record(REC_END, u64(nrecords) + u32(complete))


def profile(records, complete=1):
    """A whole file: header, the records, and an END record counting them."""
    return header() + b"".join(records) + end(len(records), complete)
