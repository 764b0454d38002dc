"""``memray``: native allocation sites still alive at the end of a tracking window.

memray (``pip install pymemprobe[native]``, Linux and macOS wheels) intercepts
``malloc``, ``mmap`` and their kin in every loaded library and records each
allocation with its Python stack, and with ``native_traces=True`` its C stack.
This probe opens a memray tracking window on a schedule, like the windowed
``tracemalloc`` probe, and at the window's end reports the sites whose
allocations made in the window are still alive: the sites that grew.

What memray cannot see: a C function called through a pointer looked up with
``dlsym`` (``ctypes.CDLL("libc.so.6").malloc``) goes straight to libc's
``malloc`` and bypasses memray's hooks; the ``malloc`` probe's in-use bytes do
see it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError, ProbeError, show
from .._flatten import SiteMap
from .._pid import getpid
from .._sitestats import is_library
from ..hookspecs import hookimpl
from ..keys import format_site
from ..metrics import Metric
from .malloc import in_use_bytes, trim_free_pages
from .process import resident_bytes

_MEMPROBE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Longest native function name kept in a site (C++ names can be very long).
_NATIVE_NAME_CHARS = 80
#: tracemalloc's allocators of its own tables: what tracing costs, never a leak.
_TRACEMALLOC_OWN = frozenset({"raw_malloc", "raw_realloc", "raw_calloc"})
#: Python frames read per record to find the user's line above a library's.
_PYTHON_FRAMES = 16
#: The interpreter's allocator entry points, and tracemalloc's hooks on them while it
#: traces (``tracemalloc_alloc``): a native site names the function that called them.
_PY_ALLOCATOR = re.compile(r"_?Py(Mem|Object)_(Raw)?(Malloc|Calloc|Realloc)|tracemalloc_\w+")


def _memray() -> Any:
    try:
        import memray
    except ImportError:
        raise ProbeError(
            "memray", "memray is not installed: pip install 'pymemprobe[native]' (or memray)"
        ) from None
    return memray


@dataclass(frozen=True)
class NativeSite:
    """Bytes and blocks allocated at one site during a window and still alive at its end.

    ``site`` is the key part: the Python line (``train.py:42``), after the
    user's own line when a library's line called the C code
    (``train.py:42--numpy/_core/numeric.py:232``), followed with
    ``native_traces`` by the innermost named C function
    (``train.py:42--leaky_alloc``), or that function alone when no Python frame
    was running (a thread of a C library).
    """

    site: str
    size_bytes: int
    count: int


def _own_file(filename: str) -> bool:
    """memprobe's files, the code it compiles (``<memprobe ...>``), and memray's."""
    return (filename.startswith((_MEMPROBE_DIR, "<memprobe"))
            or f"{os.sep}memray{os.sep}" in filename)


def _site_of(record: Any, native: bool) -> str | None:
    """The site key of one memray record; ``None`` for memprobe's or memray's own."""
    python = ""
    # An explicit depth: memray's stack_trace() without one drops the outermost frame.
    frames = record.stack_trace(_PYTHON_FRAMES)
    if frames:
        _function, filename, lineno = frames[0]
        if _own_file(filename):
            return None  # allocated by memprobe or memray themselves
        python = format_site(filename, lineno)
        if is_library(filename):  # the user's line that called the library, first
            for _f, caller, caller_line in frames[1:]:
                if not is_library(caller):
                    if not _own_file(caller):
                        python = f"{format_site(caller, caller_line)}--{python}"
                    break
    name = ""
    if native:
        for function, _filename, _lineno in record.native_stack_trace(8):
            if function in _TRACEMALLOC_OWN:
                return None  # tracemalloc's own tables (memprobe's tracing windows)
            if function and function != "<unknown>" and not _PY_ALLOCATOR.match(function):
                name = function[:_NATIVE_NAME_CHARS]
                break
    if python and name:
        return f"{python}--{name}"
    return python or name or "unknown"


def read_sites(path: str, *, native: bool = False) -> list[NativeSite]:
    """The sites of a memray capture file whose allocations were alive when tracking ended.

    Largest first. Allocations whose Python stack is in memprobe's or memray's
    own files are left out.
    """
    memray = _memray()
    sizes: dict[str, list[int]] = {}
    with memray.FileReader(path) as reader:
        for record in reader.get_leaked_allocation_records(merge_threads=True):
            site = _site_of(record, native)
            if site is None:
                continue
            acc = sizes.setdefault(site, [0, 0])
            acc[0] += record.size
            acc[1] += record.n_allocations
    ranked = sorted(sizes.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return [NativeSite(site, size, count) for site, (size, count) in ranked]


#: Seconds a child interpreter may take to read a window's capture file.
_READ_TIMEOUT_SECONDS = 600.0
#: The child's program: :func:`read_sites` on ``argv[1]``, with the parent's ``sys.path``
#: (``argv[3]``, JSON) so that sites are named as the parent names them.
_READER = ("import json, sys\n"
           "sys.path[:] = json.loads(sys.argv[3])\n"
           "from memprobe.probes.memray import read_sites\n"
           "sites = read_sites(sys.argv[1], native=sys.argv[2] == '1')\n"
           "print(json.dumps([[s.site, s.size_bytes, s.count] for s in sites]))\n")


def read_sites_apart(path: str, *, native: bool = False) -> list[NativeSite]:
    """:func:`read_sites` in a child interpreter. Naming the C functions loads the symbols
    of every library mapped (some 350 MiB with torch, measured in
    tests/native/test_memray_reader.py), and the reader keeps them: in this process they
    would stay in the resident size that memprobe judges as the user's memory. Reads in
    this process when no interpreter can be started (``sys.executable`` unset)."""
    import json
    import subprocess
    import sys

    if not sys.executable:
        return read_sites(path, native=native)
    root = os.path.dirname(_MEMPROBE_DIR)  # the memprobe this process imported, first
    search = [root, *(p for p in sys.path if p != root)]
    try:
        out = subprocess.run(
            [sys.executable, "-c", _READER, path, "1" if native else "0", json.dumps(search)],
            capture_output=True, text=True, timeout=_READ_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeError("memray", f"reading the capture file {path} failed: {exc}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProbeError("memray", f"reading the capture file {path} failed: {last}")
    return [NativeSite(str(site), int(size), int(count))
            for site, size, count in json.loads(out.stdout)]


class MemrayWindow:
    """One memray tracking window of this process, written to a capture file.

    ``open()`` starts tracking, ``close()`` stops it and returns the sites still
    alive. Only one memray tracker may run in a process at a time: ``open()``
    raises :class:`~memprobe.ProbeError` if another one runs. The capture file
    is deleted at ``close()`` unless ``keep_dir`` is given; then it stays there
    (``memray flamegraph --leaks <file>`` opens it).
    """

    def __init__(self, *, native_traces: bool = False, keep_dir: str | None = None) -> None:
        self.native_traces = native_traces
        self.keep_dir = keep_dir
        self.path: str | None = None
        self.opened_at = 0.0
        #: The resident size just before tracking started (0 before ``open()``).
        self.resident_before_bytes = 0
        #: malloc's bytes in use that stopping the tracker freed: memray's own tables
        #: (0 where glibc's statistics cannot be read).
        self.freed_bytes = 0
        self._tracker: Any = None
        self._pid = 0  # the process that opened the window

    @property
    def active(self) -> bool:
        return self._tracker is not None

    def open(self) -> None:
        # Before anything this window loads (tempfile, at the first), all of it memprobe's.
        self.resident_before_bytes = resident_bytes()
        import tempfile  # here: it imports random, which every Prober would pay otherwise

        memray = _memray()  # imported before tracking: its import is not the user's memory
        directory = self.keep_dir or tempfile.gettempdir()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        fd, path = tempfile.mkstemp(prefix=f"memprobe-memray-{getpid()}-{stamp}-",
                                    suffix=".bin", dir=directory)
        os.close(fd)
        os.unlink(path)  # memray refuses to overwrite a file
        # Aggregated format: memray keeps per-stack totals in memory and writes
        # them at the end, so the file stays small however much the window allocates.
        tracker = memray.Tracker(
            path,
            native_traces=self.native_traces,
            file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS,
        )
        try:
            tracker.__enter__()
        except RuntimeError as exc:  # another Tracker is active in this process
            del tracker
            try:
                os.unlink(path)  # the Tracker created it
            except OSError:
                pass
            raise ProbeError("memray", f"cannot open a tracking window: {exc}") from None
        self._tracker = tracker
        self._pid = getpid()
        self.path = path
        self.opened_at = time.perf_counter()

    def _forked(self) -> bool:
        """A forked child inherits the window object, not the tracking (memray does not
        follow forks): the tracker and the file are the parent's, left alone."""
        if self._tracker is not None and self._pid != getpid():
            self._tracker = None
            return True
        return False

    def close(self) -> list[NativeSite]:
        """Stop tracking; the sites allocated in the window and alive now, largest first."""
        if self._forked():
            return []
        tracker, self._tracker = self._tracker, None
        if tracker is None:
            return []
        in_use = in_use_bytes()
        tracker.__exit__(None, None, None)
        self.freed_bytes = max(0, in_use - (in_use_bytes() or 0)) if in_use else 0
        path = self.path
        assert path is not None
        try:
            if self.native_traces:  # the symbols' memory stays in the child
                return read_sites_apart(path, native=True)
            return read_sites(path, native=False)
        finally:
            if self.keep_dir is None:
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def abandon(self) -> None:
        """Stop tracking, discard the capture."""
        if not self._forked() and self._tracker is not None:
            self._tracker.__exit__(None, None, None)
            self._tracker = None
            if self.keep_dir is None and self.path:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass


def window_own_bytes(window: MemrayWindow, kept_bytes: int) -> int:
    """memprobe's share of the resident size's growth across ``window``, just closed, in
    which the program allocated ``kept_bytes`` still alive at its end. Then gives the
    heap's free pages back (glibc's ``malloc_trim(0)``, where there is one).

    While it tracks, memray holds its tables of live allocations in this process's heap,
    and with ``native_traces`` its unwinding reads the libraries' unwind tables into
    memory (measured in an RLlib EnvRunner: the resident size 14 MiB up over one window,
    7 MiB of it file pages, against 2.5 MiB over the same samples without memray). So
    the growth across the window beyond what the program kept in it (a window's
    survivors: an upper bound of what it grew by, blocks in flight included) is
    memprobe's, less the heap memray freed when it stopped
    (:attr:`MemrayWindow.freed_bytes`). That heap is given back to the system here:
    kept, the program's next allocations, a leak's included, would take it without
    growing the resident size. The trim also gives back free pages of the program's,
    which its next allocations take again: they are not counted, so the resident size
    judged dips at the window's close and comes back as they are taken, never past
    where it was. 0 when the resident size is unknown.
    """
    grown = resident_bytes()
    trim_free_pages()
    if not window.resident_before_bytes or not grown:
        return 0
    return max(0, grown - window.resident_before_bytes - kept_bytes - window.freed_bytes)


def ranked_sites(sites: Iterable[NativeSite], top: int) -> SiteMap:
    """The ``top`` sites as a :class:`SiteMap` of ``{"size_bytes", "count"}``."""
    return SiteMap(
        (s.site, {"size_bytes": s.size_bytes, "count": s.count}) for s in list(sites)[:top]
    )


class MemrayProbe:
    """Native allocation sites alive at the end of a memray tracking window (optional).

    Needs memray (``pip install 'pymemprobe[native]'``); without it ``start()``
    raises a :class:`~memprobe.ProbeError` saying so, and the Prober disables
    the probe with one warning. Tracking runs for ``window_steps`` of every
    ``period_steps`` samples of this probe: at sample ``k*P`` a window opens,
    at sample ``k*P + W`` it closes and the sites whose allocations made in
    the window are still alive are reported, largest first. Opening and
    closing a window cost milliseconds each (docs/performance.md); while a
    window is open every ``malloc`` of the process is recorded, and the Prober
    runs the probe at each of its samples whatever its budget (``every`` still
    holds), so a window lasts ``window_steps`` of the Prober's samples. The
    window's own memory is memprobe's (``own_bytes``, :func:`window_own_bytes`),
    and the resident sizes read while it is open are not judged.
    ``native_traces=True`` adds the C function to each site (symbolizing it
    costs more at the window's end). ``keep_dir`` keeps each window's capture
    file there for ``memray flamegraph --leaks``.
    """

    metrics = {
        "window_active": Metric("1 while a memray tracking window is open, else 0"),
        "window_seconds": Metric("length of the window that just closed", "seconds", "interval"),
        "survivors_bytes": Metric("at a window's end: bytes allocated in the window and still "
                                  "alive, all sites", "bytes", "interval"),
        "survivors_count": Metric("at a window's end: such allocations, all sites", "count",
                                  "interval"),
        "own_bytes": Metric(
            "memprobe's own memory from its memray windows, since start: each window's "
            "resident growth beyond what the program allocated in it and kept, less the "
            "heap memray freed, given back (window_own_bytes); judged apart from the "
            "user's", "bytes"),
        "top/<site>/size_bytes": Metric(
            "at a window's end: bytes allocated at the site during the window and still "
            "alive (the site's growth over the window)", "bytes", "interval"),
        "top/<site>/count": Metric(
            "at a window's end: such allocations at the site", "count", "interval"),
    }

    def __init__(
        self,
        *,
        window_steps: int = 1,
        period_steps: int = 10,
        top: int = 10,
        native_traces: bool = False,
        keep_dir: str | None = None,
    ) -> None:
        for opt, v, low in (("window_steps", window_steps, 1), ("period_steps", period_steps, 2),
                            ("top", top, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"memray.{opt}", f"must be an int >= {low}, got {show(v)}")
        if window_steps >= period_steps:
            raise ConfigError("memray.window_steps",
                              f"must be less than period_steps ({period_steps}), got "
                              f"{window_steps}")
        if not isinstance(native_traces, bool):
            raise ConfigError("memray.native_traces", f"must be a bool, got {show(native_traces)}")
        if keep_dir is not None and not (isinstance(keep_dir, str) and os.path.isdir(keep_dir)):
            raise ConfigError("memray.keep_dir", f"must be an existing directory, got "
                              f"{show(keep_dir)}")
        self.window_steps = window_steps
        self.period_steps = period_steps
        self.top = top
        self.native_traces = native_traces
        self.keep_dir = keep_dir
        self._calls = 0
        self._own_bytes = 0
        self._window: MemrayWindow | None = None

    @property
    def window_open(self) -> bool:
        """A tracking window is open: the Prober runs this probe at each sample until it
        closes, whatever the budget (:meth:`memprobe.engine._scheduled.ScheduledProbe.due`)."""
        return self._window is not None

    def start(self) -> None:
        _memray()  # fails now, with the reason, when memray is missing
        self._calls = 0
        self._own_bytes = 0

    def stop(self) -> None:
        if self._window is not None:
            self._window.abandon()
            self._window = None

    def __del__(self) -> None:  # a Prober never stopped must not leave memray tracking
        try:
            self.stop()
        except Exception:
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_window=None, _calls=0, _own_bytes=0)
        return state

    def sample(self) -> dict[str, Any]:
        phase = self._calls % self.period_steps
        self._calls += 1
        window = self._window
        if phase == 0 and window is None:
            window = MemrayWindow(native_traces=self.native_traces, keep_dir=self.keep_dir)
            window.open()
            self._window = window
            return {"window_active": 1}
        if phase == self.window_steps and window is not None:
            self._window = None
            seconds = time.perf_counter() - window.opened_at
            sites = window.close()
            kept = sum(s.size_bytes for s in sites)
            self._own_bytes += window_own_bytes(window, kept)
            return {
                "window_active": 0,
                "window_seconds": seconds,
                "survivors_bytes": kept,
                "survivors_count": sum(s.count for s in sites),
                "own_bytes": self._own_bytes,
                "top": ranked_sites(sites, self.top),
            }
        return {"window_active": int(window is not None)}


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("memray", MemrayProbe)
