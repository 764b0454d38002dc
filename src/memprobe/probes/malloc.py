"""``malloc``: what the C allocator (glibc malloc) holds, in use and free.

Python's small objects live in pymalloc's own arenas (mapped directly), so
``malloc`` sees what C code allocates: extension modules, numpy and torch
buffers, Python objects over 512 bytes. Told apart, its numbers separate a
native leak (``in_use_bytes`` grows) from allocator hold or fragmentation
(rss grows, ``in_use_bytes`` flat, ``free_bytes`` grows).
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any

from .._errors import ConfigError, ProbeError, show
from ..hookspecs import hookimpl
from ..metrics import Metric

#: ``struct mallinfo2`` (glibc 2.33+): ten ``size_t`` fields, in this order.
_MALLINFO2_FIELDS = (
    "arena",  # bytes obtained from the system by sbrk / arena heaps
    "ordblks",  # free chunks
    "smblks",  # free fastbin chunks
    "hblks",  # mmapped chunks
    "hblkhd",  # bytes in mmapped chunks
    "usmblks",  # unused (always 0)
    "fsmblks",  # bytes in free fastbin chunks
    "uordblks",  # bytes in chunks in use (arenas)
    "fordblks",  # bytes in free chunks (arenas)
    "keepcost",  # free bytes at the top, releasable by trimming
)


class _Libc:
    """The glibc entry points this module calls, found once per process."""

    def __init__(self) -> None:
        # ctypes is imported here, at the probe's first use, not when the plugin
        # manager imports this module for every Prober.
        import ctypes
        import ctypes.util

        self.mallinfo2: Any = None
        self.malloc_trim: Any = None
        self.malloc: Any = None
        self.free: Any = None
        self.why_unsupported = ""
        if not sys.platform.startswith("linux"):
            self.why_unsupported = (
                f"glibc malloc statistics exist on Linux only, not {sys.platform}")
            return
        try:
            try:
                libc = ctypes.CDLL("libc.so.6")
            except OSError:  # not glibc's soname: find_library runs ldconfig, so second
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            fn = libc.mallinfo2
        except (OSError, AttributeError):
            self.why_unsupported = (
                "this C library has no mallinfo2() (it needs glibc 2.33 or later; "
                "musl and older glibc lack it)"
            )
            return
        fn.restype = type("mallinfo2", (ctypes.Structure,), {
            "_fields_": [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]})
        fn.argtypes = []
        self.mallinfo2 = fn
        trim = getattr(libc, "malloc_trim", None)
        if trim is not None:
            trim.restype = ctypes.c_int
            trim.argtypes = [ctypes.c_size_t]
            self.malloc_trim = trim
        self.malloc, self.free = libc.malloc, libc.free
        self.malloc.restype = ctypes.c_void_p
        self.malloc.argtypes = [ctypes.c_size_t]
        self.free.restype = None
        self.free.argtypes = [ctypes.c_void_p]


_libc: _Libc | None = None


def libc() -> _Libc:
    """The process's glibc entry points (looked up at first use)."""
    global _libc
    if _libc is None:
        _libc = _Libc()
    return _libc


def supported() -> bool:
    """Whether this process's C library has ``mallinfo2()`` (glibc 2.33+ on Linux)."""
    return libc().mallinfo2 is not None


def malloc_stats() -> dict[str, int]:
    """The allocator's totals over all arenas, in bytes (keys as the ``malloc`` probe's).

    :raises ProbeError: the C library has no ``mallinfo2()``.
    """
    lib = libc()
    if lib.mallinfo2 is None:
        raise ProbeError("malloc", f"unsupported: {lib.why_unsupported}")
    # One unpack of the struct's bytes: reading ten ctypes fields one by one
    # costs more than the call itself.
    arena, _, _, _, hblkhd, _, _, uordblks, fordblks, keepcost = _unpack(bytes(lib.mallinfo2()))
    return {
        "arena_bytes": arena,
        "in_use_bytes": uordblks + hblkhd,
        "free_bytes": fordblks,
        "mmap_bytes": hblkhd,
        "releasable_bytes": keepcost,
    }


_unpack = struct.Struct(f"{len(_MALLINFO2_FIELDS)}N").unpack


def in_use_bytes() -> int | None:
    """malloc's bytes in use (chunks in use and mmapped, ``mallinfo2``), or None where
    the C library cannot tell."""
    return malloc_stats()["in_use_bytes"] if libc().mallinfo2 is not None else None


#: The request sizes of glibc's per-thread cache (tcache): one per size class, chunks of
#: 32 to 1040 bytes.
_CACHE_SIZES = range(24, 1033, 16)
#: Chunks of each size :func:`fill_thread_cache` frees: more than the cache keeps (7,
#: unless ``GLIBC_TUNABLES`` says otherwise). 0.23 ms a fill (measured on this project's
#: machine, ``timeit``).
_CACHE_FILL = 8


def fill_thread_cache() -> None:
    """Fill the calling thread's malloc cache (glibc's tcache), where the C library has one.

    ``mallinfo2()`` counts the chunks a thread's cache keeps for reuse as in use, and
    what it keeps changes with the sizes freed last: in a fresh process the bytes in use
    of a function that keeps nothing creep up by hundreds of bytes a call over a short
    leak check (``GLIBC_TUNABLES=glibc.malloc.tcache_count=0``: none). Filled (each size
    class mallocs and frees more chunks than the cache keeps) just before each reading,
    the cache holds the same at each: :func:`memprobe.check_leaks` does so before each
    sample; the ``malloc`` probe once at its start.
    """
    lib = libc()
    if lib.malloc is None:
        return
    chunks = [lib.malloc(n) for n in _CACHE_SIZES for _ in range(_CACHE_FILL)]
    for p in chunks:
        lib.free(p)


def trim_free_pages() -> None:
    """Give the heap's free pages back to the system: ``malloc_trim(0)``, where the C
    library has it (nothing elsewhere)."""
    trim = libc().malloc_trim
    if trim is not None:
        trim(0)


def _rss_bytes() -> int:
    """Resident bytes of this process from ``/proc/self/statm``, or -1."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return -1


def trim_reclaimed_bytes() -> int:
    """Call ``malloc_trim(0)`` and return how many bytes the allocator gave back.

    The drop of the process's resident bytes across the call (``malloc_trim``
    returns free pages inside the heap with ``madvise``, which changes neither
    ``free_bytes`` nor ``arena_bytes``), or, without ``/proc``, the drop of
    ``arena_bytes``. Another thread allocating meanwhile makes it an
    underestimate. A large figure confirms allocator hold (fragmentation):
    memory freed by the program that malloc kept. It walks every arena (costs:
    docs/performance.md) and makes later allocations fault their pages in again,
    so it is opt-in.

    :raises ProbeError: the C library has no ``mallinfo2()`` or ``malloc_trim()``.
    """
    lib = libc()
    if lib.mallinfo2 is None or lib.malloc_trim is None:
        raise ProbeError("malloc", f"unsupported: {lib.why_unsupported or 'no malloc_trim()'}")
    rss = _rss_bytes()
    arena = malloc_stats()["arena_bytes"]
    lib.malloc_trim(0)
    if rss >= 0:
        return max(0, rss - _rss_bytes())
    return max(0, arena - malloc_stats()["arena_bytes"])


class MallocProbe:
    """glibc malloc's arena, in-use, free-held and mmapped bytes, through ``mallinfo2()``.

    Linux with glibc 2.33+ only; elsewhere ``start()`` raises a
    :class:`~memprobe.ProbeError` saying why, so the Prober disables the probe
    with one warning. ``mallinfo2()`` walks each arena's free lists, so a sample
    costs more on a fragmented heap (docs/performance.md). ``trim=True`` calls
    ``malloc_trim(0)`` at every sample and reports what it reclaimed (costly, and
    it changes the allocator's state: for diagnosis only).
    """

    metrics = {
        "arena_bytes": Metric(
            "bytes malloc obtained from the system for its arenas (sbrk heap and thread "
            "arenas; mmapped chunks excluded)", "bytes"),
        "in_use_bytes": Metric(
            "bytes in chunks allocated and not freed, arenas plus mmapped chunks, less "
            "tracemalloc's own tables while it traces (the tracer's, not the program's)",
            "bytes", judged=True, growth="native"),
        "free_bytes": Metric(
            "bytes in free chunks malloc holds in its arenas (freed by the program, "
            "not returned to the system)", "bytes", judged=True),
        "mmap_bytes": Metric("bytes in chunks malloc mapped one by one (large allocations)",
                             "bytes"),
        "releasable_bytes": Metric("free bytes at the top of the main heap, which "
                                   "malloc_trim could return", "bytes"),
        "trim_reclaimed_bytes": Metric(
            "bytes malloc_trim(0) gave back at this sample (trim=True)", "bytes", "interval"),
    }

    def __init__(self, *, trim: bool = False) -> None:
        if not isinstance(trim, bool):
            raise ConfigError("malloc.trim", f"must be a bool, got {show(trim)}")
        self.trim = trim

    def start(self) -> None:
        lib = libc()
        if lib.mallinfo2 is None:
            raise ProbeError("malloc", f"unsupported: {lib.why_unsupported}")
        if self.trim and lib.malloc_trim is None:
            raise ProbeError("malloc", "unsupported: trim=True needs malloc_trim()")
        # Before the first sample: what this thread's cache will hold is there from it on.
        fill_thread_cache()

    def stop(self) -> None:
        pass

    def sample(self) -> dict[str, int]:
        reclaimed = trim_reclaimed_bytes() if self.trim else None
        out = malloc_stats()
        if reclaimed is not None:
            out["trim_reclaimed_bytes"] = reclaimed
        # tracemalloc keeps a trace of every traced block in memory it gets from malloc:
        # 65 to 95 bytes per block the program keeps, which would read as a native leak
        # beside every Python one (measured: docs/probes.md, malloc).
        out["in_use_bytes"] -= _tracemalloc_own_bytes()
        return out


def _tracemalloc_own_bytes() -> int:
    """The memory tracemalloc's own tables take from malloc (0 when it does not trace)."""
    import tracemalloc

    return tracemalloc.get_tracemalloc_memory() if tracemalloc.is_tracing() else 0


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("malloc", MallocProbe)
