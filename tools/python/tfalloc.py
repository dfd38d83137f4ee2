# SPDX-License-Identifier: MIT
"""tfalloc's control API for Python programs (preload/tfalloc.h, over ctypes).

Say who owns the memory a program allocates:

    import tfalloc

    with tfalloc.scope("model", "encoder"):      # container "model", resource "encoder"
        weights = bytearray(64 << 20)            # charged to model/encoder

    @tfalloc.scope("requests", "parse")          # the same, for every call of a function
    def parse(text): ...

    r = tfalloc.lookup_or_create("model", "scope", "encoder")
    r.set_limit(256 << 20)                       # allocations past it raise MemoryError
    print(r.info().memory_used, r.stats("cpu")["peak_bytes_in_use"])
    blocks, nbytes = tfalloc.cleanup("requests") # what the container's resources still hold

Run the program under the shim (`tfalloc run -- python3 prog.py`, or
LD_PRELOAD=libtfalloc.so) with this directory on PYTHONPATH.  Without the
shim the module works too and does nothing: tfalloc.active() is False, calls
that return a status return ENOTACTIVE, calls that return data return it
zeroed (Resource with id 0, stats of zeros, cleanup (0, 0)), dump_profile()
returns None: a program runs unchanged with and without tfalloc.

Errors: a call that fails raises tfalloc.Error (its .code is one of the
E* constants below, .message says what it means).  ENOTACTIVE never raises.

What is charged: a scope is current on the calling thread (an OS thread; one
Python thread each) until it is left.  Python's small objects (512 bytes or
less) come from pymalloc's own arenas, not from malloc, and so are charged
to nobody unless python runs with PYTHONMALLOC=malloc; larger ones (a
bytearray of a megabyte, a numpy array's data, a big list) reach malloc and
are charged.  A block stays charged to the resource that was current when it
was allocated, wherever it is freed.  Scopes are per thread, not per
coroutine: do not await inside a scope that other tasks of the loop share.

Standard library only (ctypes); Python 3.7 or later.
"""

import collections
import contextlib
import ctypes
import os
import types

__all__ = [
    "Error", "Resource", "ResourceInfo", "CleanupResult", "PointerInfo", "ContainerInfo",
    "active", "api_version", "scope", "scope_enter", "scope_exit",
    "create", "lookup", "lookup_or_create", "unref", "delete", "info", "set_limit", "stats",
    "cleanup", "clear", "container_info", "device_stats", "dump_profile", "pointer_info",
    "strerror",
]

API_VERSION = 1
NAME_MAX = 127   # bytes of a name (UTF-8), without its NUL
DEBUG_MAX = 255

# enum tfalloc_error
OK = 0
ENOTACTIVE = -1    # the program does not run under tfalloc: nothing done
EINVAL = -2        # None or empty name, bad argument, no reference left
ENAMETOOLONG = -3  # a name longer than NAME_MAX bytes
ENOENT = -4        # no such resource, container, device or pointer
EEXIST = -5        # create: the resource exists
ESCOPE = -6        # scope exit without an enter, or scopes nested too deep
ENOMEM = -7        # tfalloc's own tables are full
EIO = -8           # the profile could not be written

_MESSAGES = {
    OK: "ok",
    ENOTACTIVE: "tfalloc is not active in this process",
    EINVAL: "invalid argument",
    ENAMETOOLONG: "name too long",
    ENOENT: "no such resource, container, device or pointer",
    EEXIST: "resource exists",
    ESCOPE: "scope exit without enter, or scopes too deep",
    ENOMEM: "tfalloc's tables are full",
    EIO: "the profile could not be written",
}
_NAMES = {OK: "OK", ENOTACTIVE: "ENOTACTIVE", EINVAL: "EINVAL", ENAMETOOLONG: "ENAMETOOLONG",
          ENOENT: "ENOENT", EEXIST: "EEXIST", ESCOPE: "ESCOPE", ENOMEM: "ENOMEM", EIO: "EIO"}


def strerror(code):
    """The message of an error code (tfalloc_strerror)."""
    return _MESSAGES.get(code, "unknown error")


class Error(Exception):
    """A call of the control API failed: .code (tfalloc.E*), .name ("ENOENT"),
    .message, and .call (what was called)."""

    def __init__(self, code, call=""):
        self.code = code
        self.name = _NAMES.get(code, str(code))
        self.message = strerror(code)
        self.call = str(call)
        super().__init__(code, self.message)

    def __str__(self):
        where = (self.call + ": ") if self.call else ""
        return "%s%s (%s)" % (where, self.message, self.name)


# ---- the structures of preload/tfalloc.h -------------------------------------------------------

_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_int = ctypes.c_int
_str = ctypes.c_char_p
_P = ctypes.POINTER
_F = ctypes.CFUNCTYPE  # foreign calls release the GIL


class _ResourceHandle(ctypes.Structure):
    _fields_ = [
        ("id", _u32),
        ("reserved", _u32),
        ("hash_code", _u64),
        ("device", ctypes.c_char * 16),
        ("container", ctypes.c_char * (NAME_MAX + 1)),
        ("name", ctypes.c_char * (NAME_MAX + 1)),
        ("maybe_type_name", ctypes.c_char * (NAME_MAX + 1)),
    ]


_STATS_FIELDS = ("num_allocs", "num_frees", "bytes_in_use", "peak_bytes_in_use",
                 "largest_alloc_size", "total_bytes", "bytes_limit", "allocated_bytes_in_use",
                 "peak_allocated_bytes_in_use", "total_allocated_bytes")


class _Stats(ctypes.Structure):
    _fields_ = [(f, _u64) for f in _STATS_FIELDS]


class _ResourceInfo(ctypes.Structure):
    _fields_ = [
        ("handle", _ResourceHandle),
        ("refcount", _u32),
        ("deleted", _int),
        ("memory_used", _u64),
        ("peak_memory_used", _u64),
        ("bytes_limit", _u64),
        ("debug_string", ctypes.c_char * (DEBUG_MAX + 1)),
    ]


class _CleanupResult(ctypes.Structure):
    _fields_ = [("blocks", _u64), ("bytes", _u64), ("resources", _u32)]


class _PointerInfo(ctypes.Structure):
    _fields_ = [
        ("requested_size", _u64),
        ("allocated_size", _u64),
        ("allocation_id", _u64),
        ("resource_id", _u32),
        ("device", ctypes.c_char * 16),
    ]


class _ContainerInfo(ctypes.Structure):
    _fields_ = [
        ("container", ctypes.c_char * (NAME_MAX + 1)),
        ("name", ctypes.c_char * (NAME_MAX + 1)),
        ("resource_is_private_to_kernel", _int),
    ]


_H = _P(_ResourceHandle)


class _Api(ctypes.Structure):
    """struct tfalloc_api: version, size, then the function pointers in order."""
    _fields_ = [
        ("version", _u32),
        ("size", _u32),
        ("scope_enter", _F(_int, _str, _str)),
        ("scope_enter_handle", _F(_int, _H)),
        ("scope_exit", _F(_int)),
        ("resource_create", _F(_int, _str, _str, _str, _str, _H)),
        ("resource_lookup", _F(_int, _str, _str, _str, _H)),
        ("resource_lookup_or_create", _F(_int, _str, _str, _str, _str, _H, _P(_int))),
        ("resource_unref", _F(_int, _H)),
        ("resource_delete", _F(_int, _str, _str, _str)),
        ("resource_delete_handle", _F(_int, _H)),
        ("resource_info", _F(_int, _H, _P(_ResourceInfo))),
        ("resource_set_limit", _F(_int, _H, _u64)),
        ("resource_stats", _F(_int, _H, _str, _P(_Stats))),
        ("container_cleanup", _F(_int, _str, _P(_CleanupResult))),
        ("clear", _F(_int)),
        ("container_info", _F(_int, _str, _str, _str, _int, _P(_ContainerInfo))),
        ("device_stats", _F(_int, _str, _P(_Stats))),
        ("dump_profile", _F(_int, _P(ctypes.c_char), ctypes.c_size_t)),
        ("pointer_info", _F(_int, ctypes.c_void_p, _P(_PointerInfo))),
    ]


def _find_api():
    """The shim's table (tfalloc_control_api() of the process), or None."""
    try:
        get = ctypes.CDLL(None).tfalloc_control_api
    except (AttributeError, OSError):
        return None
    get.restype = ctypes.c_void_p
    get.argtypes = []
    p = get()
    if not p:
        return None
    api = ctypes.cast(p, _P(_Api)).contents
    # Later versions only add members at the end: a smaller table is not ours.
    if api.version != API_VERSION or api.size < ctypes.sizeof(_Api):
        return None
    # The function objects once (reading a member makes a new one each time).
    return types.SimpleNamespace(**{name: getattr(api, name) for name, _ in _Api._fields_})


_api = _find_api()


def active():
    """True when the program runs under tfalloc."""
    return _api is not None


def api_version():
    """The API version of the shim in the process, or None without it."""
    return _api.version if _api is not None else None


# ---- arguments and results ---------------------------------------------------------------------


def _name(s, what, call):
    """A name for C: str (UTF-8) or bytes; None passes as NULL (the shim says EINVAL)."""
    if s is None:
        return None
    if isinstance(s, str):
        s = s.encode("utf-8", "surrogateescape")
    elif isinstance(s, (bytes, bytearray)):
        s = bytes(s)
    else:
        raise TypeError("%s: %s must be a str, not %s" % (call, what, type(s).__name__))
    if b"\0" in s:
        # C would read a shorter name: another resource than the one asked for.
        raise Error(EINVAL, "%s: %s contains a NUL character" % (call, what))
    return s


def _check(code, call):
    if code == OK or code == ENOTACTIVE:
        return code
    raise Error(code, call)


def _text(b):
    return b.decode("utf-8", "replace")


class _Call:
    """What was called, for messages: formatted only when one is needed."""

    __slots__ = ("func", "args")

    def __init__(self, func, *args):
        self.func = func
        self.args = args

    def __str__(self):
        args = ", ".join(hex(a) if self.func == "pointer_info" and isinstance(a, int) else
                         repr(a) if isinstance(a, (str, bytes, int, type(None), Resource)) else
                         type(a).__name__ for a in self.args)
        return "%s(%s)" % (self.func, args)


class Resource:
    """A resource of the manager: TensorFlow's ResourceHandle (container, name,
    type, its hash, and its id, the tag of its memory in profiles).

    create() and lookup_or_create() return one; lookup() and
    lookup_or_create() also take a reference for the caller, given back with
    unref().  Without the shim every field is zero or empty.
    """

    __slots__ = ("_handle", "created")

    def __init__(self, handle=None, created=False):
        self._handle = handle if handle is not None else _ResourceHandle()
        self.created = created  # lookup_or_create: made by this call

    id = property(lambda self: self._handle.id, doc="the tag of the resource in profiles")
    hash_code = property(lambda self: self._handle.hash_code, doc="FNV-1a 64 of the type name")
    device = property(lambda self: _text(self._handle.device))
    container = property(lambda self: _text(self._handle.container))
    name = property(lambda self: _text(self._handle.name))
    type = property(lambda self: _text(self._handle.maybe_type_name))

    def __bool__(self):
        return self._handle.id != 0

    def __eq__(self, other):
        if not isinstance(other, Resource):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def _key(self):
        h = self._handle
        return (h.id, h.hash_code, bytes(h.container), bytes(h.name))

    def __repr__(self):
        return "<tfalloc.Resource %d %s/%s type %s>" % (self.id, self.container, self.name, self.type)

    def info(self):
        return info(self)

    def stats(self, device="cpu"):
        return stats(self, device)

    def set_limit(self, bytes_limit):
        return set_limit(self, bytes_limit)

    def unref(self):
        return unref(self)

    def delete(self):
        return delete(self)

    def scope(self):
        """A scope of this resource: `with r.scope(): ...`."""
        return scope(self)


ResourceInfo = collections.namedtuple(
    "ResourceInfo", "resource refcount deleted memory_used peak_memory_used bytes_limit debug_string")
ResourceInfo.__doc__ = """What resource_info says: refcount (the manager's, lookups' and scopes'
references), deleted (out of its container; its figures remain), memory_used (bytes in
use on every device), peak_memory_used, bytes_limit (0: none), debug_string."""

PointerInfo = collections.namedtuple(
    "PointerInfo", "requested_size allocated_size allocation_id resource_id device")
PointerInfo.__doc__ = "The TrackingAllocator's answers about one live block."

ContainerInfo = collections.namedtuple("ContainerInfo",
                                       "container name resource_is_private_to_kernel")
ContainerInfo.__doc__ = "TensorFlow's ContainerInfo: the container and name a kernel's resource gets."


class CleanupResult(collections.namedtuple("CleanupResult", "blocks bytes")):
    """(blocks, bytes) still live in a container's resources when it was
    cleaned up; .resources: how many resources were deleted."""

    def __new__(cls, blocks=0, nbytes=0, resources=0):
        self = super().__new__(cls, blocks, nbytes)
        self.resources = resources
        return self

    def __repr__(self):
        return "CleanupResult(blocks=%d, bytes=%d, resources=%d)" % (self.blocks, self.bytes,
                                                                    self.resources)


def _stats_dict(st):
    return {f: getattr(st, f) for f in _STATS_FIELDS}


def _handle_of(resource, call):
    if not isinstance(resource, Resource):
        raise TypeError("%s: expected a tfalloc.Resource, not %s" % (call, type(resource).__name__))
    return ctypes.byref(resource._handle)


# ---- scopes ------------------------------------------------------------------------------------


_UNSET = object()  # an argument not given (None is a bad name, passed on as NULL)


def scope_enter(container, name=_UNSET):
    """Makes container/name (type "scope", made on first use; container "" is
    the default container) current on this thread until scope_exit(); with a
    Resource, that resource; with a name alone, the default container.
    Prefer `with tfalloc.scope(...)`."""
    if isinstance(container, Resource) and name is _UNSET:
        call = _Call("scope_enter", container)
        if _api is None:
            return ENOTACTIVE
        return _check(_api.scope_enter_handle(ctypes.byref(container._handle)), call)
    if name is _UNSET:
        container, name = "", container
    call = _Call("scope_enter", container, name)
    if _api is None:
        return ENOTACTIVE
    return _check(_api.scope_enter(_name(container, "container", call), _name(name, "name", call)),
                  call)


def scope_exit():
    """Restores what was current before the last scope_enter (Error ESCOPE: none)."""
    if _api is None:
        return ENOTACTIVE
    return _check(_api.scope_exit(), _Call("scope_exit"))


class scope(contextlib.ContextDecorator):
    """A resource current on this thread for a block or a function:

        with tfalloc.scope("model", "encoder"): ...
        @tfalloc.scope("requests", "parse")
        def parse(...): ...
        with tfalloc.scope(resource): ...     # a Resource of any type
        with tfalloc.scope("encoder"): ...    # the default container

    Scopes nest (64 deep).  Entering raises Error on a bad name; the scope is
    left even when the block raises.
    """

    def __init__(self, container, name=_UNSET):
        self.container = container
        self.name = name

    def __enter__(self):
        scope_enter(self.container, self.name)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            scope_exit()
        except Error:
            if exc_type is None:  # never hide the block's own exception
                raise
        return False

    def __repr__(self):
        if self.name is _UNSET:
            return "tfalloc.scope(%r)" % (self.container,)
        return "tfalloc.scope(%r, %r)" % (self.container, self.name)


# ---- resources ---------------------------------------------------------------------------------


def create(container, type, name, debug_string=None):
    """A new resource owned by the manager (Error EEXIST when the key is taken)."""
    call = _Call("create", container, type, name)
    r = Resource()
    if _api is not None:
        _check(_api.resource_create(_name(container, "container", call), _name(type, "type", call),
                                    _name(name, "name", call),
                                    _name(debug_string, "debug_string", call),
                                    ctypes.byref(r._handle)), call)
    return r


def lookup(container, type, name):
    """An existing resource (Error ENOENT), with a reference for the caller (unref())."""
    call = _Call("lookup", container, type, name)
    r = Resource()
    if _api is not None:
        _check(_api.resource_lookup(_name(container, "container", call), _name(type, "type", call),
                                    _name(name, "name", call), ctypes.byref(r._handle)), call)
    return r


def lookup_or_create(container, type, name, debug_string=None):
    """The resource, made when it does not exist (.created says so); either
    way with a reference for the caller (unref())."""
    call = _Call("lookup_or_create", container, type, name)
    r = Resource()
    if _api is not None:
        created = _int(0)
        _check(_api.resource_lookup_or_create(
            _name(container, "container", call), _name(type, "type", call), _name(name, "name", call),
            _name(debug_string, "debug_string", call), ctypes.byref(r._handle),
            ctypes.byref(created)), call)
        r.created = bool(created.value)
    return r


def unref(resource):
    """Gives back a reference taken by lookup() or lookup_or_create()."""
    call = _Call("unref", resource)
    h = _handle_of(resource, call)
    if _api is None:
        return ENOTACTIVE
    return _check(_api.resource_unref(h), call)


def delete(container, type=None, name=None):
    """Deletes a resource: delete(resource) or delete(container, type, name).
    It leaves its container; its memory stays charged to it and shows in the report."""
    if isinstance(container, Resource) and type is None and name is None:
        call = _Call("delete", container)
        h = _handle_of(container, call)
        if _api is None:
            return ENOTACTIVE
        return _check(_api.resource_delete_handle(h), call)
    call = _Call("delete", container, type, name)
    if _api is None:
        return ENOTACTIVE
    return _check(_api.resource_delete(_name(container, "container", call), _name(type, "type", call),
                                       _name(name, "name", call)), call)


def info(resource):
    """A ResourceInfo: refcount, deleted, memory_used, peak_memory_used, bytes_limit, debug_string."""
    call = _Call("info", resource)
    h = _handle_of(resource, call)
    out = _ResourceInfo()
    if _api is not None:
        _check(_api.resource_info(h, ctypes.byref(out)), call)
    return ResourceInfo(Resource(out.handle), out.refcount, bool(out.deleted), out.memory_used,
                        out.peak_memory_used, out.bytes_limit, _text(out.debug_string))


def set_limit(resource, bytes_limit):
    """Allocations charged to the resource that would take its memory used
    past bytes_limit fail as out of memory (MemoryError in Python).  0 removes it."""
    call = _Call("set_limit", resource, bytes_limit)
    h = _handle_of(resource, call)
    if not isinstance(bytes_limit, int) or isinstance(bytes_limit, bool):
        raise TypeError("%s: bytes_limit must be an int" % call)
    if _api is None:
        return ENOTACTIVE
    if not 0 <= bytes_limit < 1 << 64:
        raise Error(EINVAL, call)
    return _check(_api.resource_set_limit(h, bytes_limit), call)


def stats(resource, device="cpu"):
    """What was charged to the resource on a device, as a dict of AllocatorStats."""
    call = _Call("stats", resource, device)
    h = _handle_of(resource, call)
    out = _Stats()
    if _api is not None:
        _check(_api.resource_stats(h, _name(device, "device", call), ctypes.byref(out)), call)
    return _stats_dict(out)


# ---- containers and the process ----------------------------------------------------------------


def cleanup(container):
    """Deletes every resource of the container, and the container; returns
    (blocks, bytes) of the allocations still charged to them (a scoped leak
    check; the shim also reports them on stderr and in the profile).
    Error ENOENT for a container that does not exist."""
    call = _Call("cleanup", container)
    if _api is None:
        return CleanupResult()
    out = _CleanupResult()
    _check(_api.container_cleanup(_name(container, "container", call), ctypes.byref(out)), call)
    return CleanupResult(out.blocks, out.bytes, out.resources)


def clear():
    """Deletes every resource of every container."""
    if _api is None:
        return ENOTACTIVE
    return _check(_api.clear(), _Call("clear"))


def container_info(container_attr, shared_name_attr, node_name, use_node_name_as_default=False):
    """ContainerInfo: container_attr, or the default container when it is "";
    shared_name_attr when not "" (it may not start with '_'), else node_name
    when use_node_name_as_default, else a name private to this process."""
    call = _Call("container_info", container_attr, shared_name_attr, node_name)
    out = _ContainerInfo()
    if _api is not None:
        _check(_api.container_info(_name(container_attr, "container_attr", call),
                                   _name(shared_name_attr, "shared_name_attr", call),
                                   _name(node_name, "node_name", call),
                                   1 if use_node_name_as_default else 0, ctypes.byref(out)), call)
    return ContainerInfo(_text(out.container), _text(out.name),
                         bool(out.resource_is_private_to_kernel))


def device_stats(device="cpu"):
    """AllocatorStats of a device ("cpu"), as a dict."""
    call = _Call("device_stats", device)
    out = _Stats()
    if _api is not None:
        _check(_api.device_stats(_name(device, "device", call), ctypes.byref(out)), call)
    return _stats_dict(out)


def dump_profile():
    """Writes the profile now (a snapshot) and returns its path; None without the shim."""
    if _api is None:
        return None
    buf = ctypes.create_string_buffer(4096)
    _check(_api.dump_profile(buf, len(buf)), _Call("dump_profile"))
    return os.fsdecode(buf.value)


def _address(obj, call):
    """The address of an int, a ctypes object or a writable buffer (bytearray, array, numpy)."""
    if isinstance(obj, bool):
        raise TypeError("%s: expected an address or a buffer" % call)
    if isinstance(obj, int):
        return obj
    if obj is None:
        return 0
    if isinstance(obj, ctypes.c_void_p):
        return obj.value or 0
    if isinstance(obj, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
        return ctypes.addressof(obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError("%s: expected an address or a buffer, not %s" % (call, type(obj).__name__))
    with view:
        if view.nbytes == 0:
            return 0
        if view.readonly:
            raise TypeError("%s: a read-only buffer has no address here" % call)
    first = ctypes.c_char.from_buffer(obj)  # an export of the buffer, given back below
    try:
        return ctypes.addressof(first)
    finally:
        del first


def pointer_info(addr):
    """Requested size, allocated size, allocation id and resource of a live
    block tfalloc handed out (Error ENOENT for any other address).  addr: an
    int, a ctypes object, or a writable buffer such as a bytearray (its data)."""
    call = _Call("pointer_info", addr)
    a = _address(addr, call)
    out = _PointerInfo()
    if _api is not None:
        if not 0 <= a < 1 << 64:
            raise Error(EINVAL, call)
        _check(_api.pointer_info(a or None, ctypes.byref(out)), call)
    return PointerInfo(out.requested_size, out.allocated_size, out.allocation_id, out.resource_id,
                       _text(out.device))
