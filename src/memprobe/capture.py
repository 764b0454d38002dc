"""Deep capture: name the culprits of a leak the cheap probes saw, in one process, for a while.

When a leak alarm fires, :class:`CulpritCapture` opens, for ``duration_seconds``:
a tracemalloc window (Python lines whose allocations survive it), a memray
window where memray is installed (native sites), and two counts of live
objects by type (the types that grew), plus referrer chains of the type that
grew most. It does not block: ``start()`` opens the windows and returns, the
caller's loop goes on, and ``finish()`` (when :meth:`~CulpritCapture.due`)
closes them and returns :class:`Culprits`.

Bounded: in time by ``duration_seconds`` (and ``holders_timeout_seconds`` for
the referrer walk), in memory by ``max_overhead_bytes``: :meth:`due` is true
early once tracemalloc's own memory passes it.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import time
import tracemalloc
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigError, ProbeError, show
from ._flatten import SiteMap
from ._own import own_type_counts
from ._sitestats import MEMPROBE_PACKAGES, Stats, default_filters, site_stats
from .keys import (
    first_frame,
    format_culprit,
    format_site,
    frame_line,
    is_library_site,
    is_library_type,
    shorten_path,
)
from .probes.memray import MemrayWindow, NativeSite, _memray
from .probes.objects import type_name
from .probes.tracemalloc import CAPTURE_NFRAME, acquire_tracing, growth, release_tracing
from .referrers import Chain, heap_walk_safe, referrer_chains


def _is_own_type(t: type) -> bool:
    """A type of memprobe's packages (a Verdict the user keeps is still memprobe's)."""
    module = getattr(t, "__module__", "") or ""
    return module.split(".", 1)[0] in MEMPROBE_PACKAGES


@dataclass(frozen=True)
class Culprits:
    """What a capture found, largest first.

    :ivar python_sites: ``(site, size_bytes, count)``: Python lines whose allocations
        made during the capture are still alive at its end (or, when tracing was
        already on, whose live bytes grew); a library line comes after the user's
        line that called it (``app.py:12--numpy/_core/numeric.py:232``).
    :ivar native_sites: memray's sites alive at the end of its window (empty without memray).
    :ivar types: ``(type name, count)``: types whose live instances grew.
    :ivar holders: referrer chains of sampled instances of the type that grew most.
    :ivar duration_seconds: how long the windows were open.
    :ivar notes: why a part is missing (memray absent, memory bound hit, ...).
    """

    python_sites: tuple[tuple[str, int, int], ...] = ()
    native_sites: tuple[NativeSite, ...] = ()
    types: tuple[tuple[str, int], ...] = ()
    holders: tuple[Chain, ...] = ()
    duration_seconds: float = 0.0
    notes: tuple[str, ...] = ()

    def sections(self) -> dict[str, dict[str, Any]]:
        """The culprits as probe-shaped results, ``{probe: {metric tree}}``, to flatten
        into a sample: ``tracemalloc/survivors/<site>/size_bytes``,
        ``memray/top/<site>/size_bytes``, ``objects/growth/<type>/count``."""
        out: dict[str, dict[str, Any]] = {}
        if self.python_sites:
            out["tracemalloc"] = {"survivors": SiteMap(
                (s, {"size_bytes": b, "count": c}) for s, b, c in self.python_sites)}
        if self.native_sites:
            out["memray"] = {"top": SiteMap(
                (s.site, {"size_bytes": s.size_bytes, "count": s.count})
                for s in self.native_sites)}
        if self.types:
            out["objects"] = {"growth": SiteMap((t, {"count": n}) for t, n in self.types)}
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary, for a JSONL record or a verdict."""
        return {
            "duration_seconds": self.duration_seconds,
            "python_sites": [list(s) for s in self.python_sites],
            "native_sites": [[s.site, s.size_bytes, s.count] for s in self.native_sites],
            "types": [list(t) for t in self.types],
            "holders": [str(c) for c in self.holders],
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        """Lines for a person: the top culprit of each kind."""
        lines = []
        if self.python_sites:
            s, b, c = self.python_sites[0]
            lines.append(f"python: {format_culprit(s)} keeps {b} bytes in {c} blocks")
        if self.native_sites:
            ns = self.native_sites[0]
            lines.append(f"native: {format_culprit(ns.site)} keeps {ns.size_bytes} bytes "
                         f"in {ns.count} blocks")
        if self.types:
            t, grown = self.types[0]
            lines.append(f"objects: {t} +{grown}")
        lines.extend(f"held by: {c}" for c in self.holders)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _memray_files() -> tuple[str, ...]:
    """A filename pattern for memray's own Python files (found without importing it)."""
    try:
        spec = importlib.util.find_spec("memray")
    except (ImportError, ValueError):
        return ()
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return tuple(os.path.join(loc, "*") for loc in locations)


#: ``Py_TPFLAGS_HEAPTYPE``: set on classes created by a ``class`` statement.
_HEAPTYPE = 1 << 9
#: Fewest new instances for a type's holders to be walked: one or two are the
#: ordinary churn of any program (a cached function, a new iterator).
_MIN_TYPE_GROWTH = 5


#: A container is read for what the user's line keeps when it holds this many items.
_MIN_KEPT_ITEMS = 4
#: Containers whose holders are walked.
_KEPT_CONTAINERS = 2
#: The containers read: their newest item is the last one.
_CONTAINERS = (list, deque, dict)


def _kept_at(site: str, timeout_seconds: float) -> list[Any]:
    """The newest items of lists, deques and dicts (up to :data:`_KEPT_CONTAINERS`)
    allocated under ``site``'s first frame (``app.py:12`` of ``app.py:12--numpy/...``)
    while tracing: what the user's line makes and keeps, such as numpy arrays in a list,
    which are no heap type to count and walk. Read while tracemalloc traces, within
    ``timeout_seconds`` (0.15-0.25 s for a heap of 300,000-400,000 objects)."""
    first = first_frame(site)
    lineno = frame_line(first)
    if lineno is None:
        return []
    found: list[Any] = []
    deadline = time.perf_counter() + timeout_seconds
    # One comprehension over the heap (a loop allocating per object would be traced:
    # seconds on a large heap), then the candidates, the oldest first (a list the user
    # keeps for good is long-lived: the last generation, at the end).
    objs = gc.get_objects()
    try:
        candidates = [o for o in objs if type(o) in _CONTAINERS and len(o) >= _MIN_KEPT_ITEMS]
    finally:
        del objs
    try:
        for n, obj in enumerate(reversed(candidates)):
            if not n % 256 and time.perf_counter() > deadline:
                break
            item = next(reversed(obj.values())) if type(obj) is dict else obj[-1]
            tb = tracemalloc.get_object_traceback(item)
            made_here = tb is not None and any(
                f.lineno == lineno and format_site(f.filename, lineno) == first for f in tb)
            if made_here and all(item is not f for f in found):
                found.append(item)
                if len(found) >= _KEPT_CONTAINERS:
                    break
    finally:
        del candidates
    return found


def _type_counts(capture: CulpritCapture) -> Counter[type]:
    """Live objects by type, memprobe's own (the Prober's history and tiers, this
    capture's state) left out: they are not the user's, whatever their type."""
    return own_type_counts((capture,))


def _grown_types(before: Counter[type], now: Counter[type],
                 top: int) -> tuple[list[tuple[str, int]], type | None]:
    """The ``top`` types with more live objects ``now`` than ``before``, with their growth;
    and the type whose holders to walk (None: none grew enough)."""
    deltas = sorted(((t, c - before.get(t, 0)) for t, c in now.items()),
                    key=lambda tc: (-tc[1], type_name(tc[0])))
    # Instances of memprobe's classes are never the user's culprit (what memprobe
    # holds is already left out of both counts, whatever its type).
    deltas = [(t, d) for t, d in deltas if d > 0 and not _is_own_type(t)][:top]
    # The holders walk explains a class defined in Python (a heap type): the
    # C types (containers, functions, weakrefs) grow with any leak and import.
    grown_type = next((t for t, d in deltas if t.__flags__ & _HEAPTYPE
                       and d >= _MIN_TYPE_GROWTH), None)
    return [(type_name(t), d) for t, d in deltas], grown_type


@dataclass
class CulpritCapture:
    """One capture of this process's culprits, opened by ``start()``, closed by ``finish()``.

    :param duration_seconds: how long the windows stay open.
    :param native: open a memray window too: ``True`` (fail if memray is absent),
        ``False``, or ``None`` (where memray is installed).
    :param native_traces: the memray window records C stacks too, so native sites
        name the C function (symbolizing costs about 0.7 s the first time in a process).
    :param objects: count live objects by type at start and end.
    :param holders: walk referrer chains of the type that grew most.
    :param top: sites and types kept in each list.
    :param max_overhead_bytes: memory tracemalloc may use for its traces; ``due()``
        turns true as soon as it passes this.
    :param holders_timeout_seconds: time budget of the referrer walk.
    """

    duration_seconds: float = 10.0
    native: bool | None = None
    native_traces: bool = False
    objects: bool = True
    holders: bool = True
    top: int = 10
    max_overhead_bytes: int = 64 << 20
    holders_timeout_seconds: float = 1.0
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)

    def __post_init__(self) -> None:
        d = self.duration_seconds
        if not isinstance(d, (int, float)) or isinstance(d, bool) or not d > 0:
            raise ConfigError("capture.duration_seconds", f"must be a number > 0, got {show(d)}")
        if self.native not in (True, False, None):
            raise ConfigError("capture.native", f"must be True, False or None, got "
                              f"{show(self.native)}")
        for opt in ("top", "max_overhead_bytes"):
            v = getattr(self, opt)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"capture.{opt}", f"must be an int >= 1, got {show(v)}")
        self._started_at: float | None = None
        self._tracing = False
        self._baseline: Stats | None = None
        self._types: Counter[type] | None = None
        self._memray: MemrayWindow | None = None
        self._notes: list[str] = []
        self._filters = default_filters(_memray_files())

    @property
    def active(self) -> bool:
        """Whether the windows are open."""
        return self._started_at is not None

    def start(self) -> CulpritCapture:
        """Open the windows (tracemalloc, memray where asked and installed, object counts)."""
        if self.active:
            return self
        self._notes = []
        window: MemrayWindow | None = None
        if self.native is not False:
            # memray is imported before any window opens: its import (rich, textual)
            # must not show up as the user's allocations or new objects.
            try:
                _memray()
                window = MemrayWindow(native_traces=self.native_traces)
            except ProbeError as exc:
                if self.native:
                    raise
                self._notes.append(f"no native sites: {exc.message}")
        # Site names read sysconfig's paths once per process (an import): now, not
        # inside the window.
        shorten_path(__file__)
        count_types = self.objects and heap_walk_safe()
        if not count_types and (self.objects or self.holders):
            self._notes.append("no object counts or holders: the capture runs outside the "
                               "main thread, where a walk of the heap could break the "
                               "main thread's code (CPython)")
        already = tracemalloc.is_tracing()
        # Enough frames to name the user's line above a library's (only for the window).
        acquire_tracing(CAPTURE_NFRAME)
        self._tracing = True
        if tracemalloc.get_traceback_limit() < 2:
            self._notes.append(
                "python sites are the allocating lines: tracing was already on with one "
                "frame; trace with nframe >= 2 to name the user's line above a library's")
        # Tracing already on (a tracemalloc probe, the user): blocks from before
        # the capture are traced too, so the culprits are the growth from a baseline.
        self._baseline = site_stats("user", self._filters) if already else None
        if window is not None:
            try:
                window.open()
                self._memray = window
            except ProbeError as exc:
                if self.native:
                    self.abandon()
                    raise
                self._notes.append(f"no native sites: {exc.message}")
        if count_types:
            # Last: what opening the windows made (tracing's state, memray's) is in
            # the baseline, not counted as grown.
            self._types = _type_counts(self)
        self._started_at = self.clock()
        return self

    def due(self) -> bool:
        """Whether ``finish()`` should be called now: the duration is over, or the
        memory bound is passed."""
        if self._started_at is None:
            return False
        if self.clock() - self._started_at >= self.duration_seconds:
            return True
        return tracemalloc.get_tracemalloc_memory() > self.max_overhead_bytes

    def finish(self) -> Culprits:
        """Close the windows and name the culprits (about the cost of one tracemalloc
        and one objects sample, plus the referrer walk)."""
        if self._started_at is None:
            raise ProbeError("capture", "finish() called before start()")
        # Cyclic garbage made in the window is no culprit: one full collection first
        # (where the program leaves the collector on; garbage never collected is kept).
        # Else it stays traced and counted until the oldest generation's collection,
        # rare in a large heap, and a loop making reference cycles had them named
        # first (the frame a function kept in a local of its own: tests/test_alarm_capture.py).
        if gc.isenabled():
            gc.collect()
        # Objects first, before this frame makes any: what finish() creates must not
        # count as grown (so the diff is made in a function of its own: a closure here
        # would put a cell in this frame before the count).
        now = _type_counts(self) if self._types is not None else None
        duration = self.clock() - self._started_at
        notes = self._notes
        if tracemalloc.get_tracemalloc_memory() > self.max_overhead_bytes:
            notes.append(f"closed early at {duration:.1f} s: tracemalloc used over "
                         f"{self.max_overhead_bytes} bytes")
        types: list[tuple[str, int]] = []
        grown_type: type | None = None
        if now is not None and self._types is not None:
            types, grown_type = _grown_types(self._types, now, self.top)
            self._types = None
            del now
        native: list[NativeSite] = []
        if self._memray is not None:
            window, self._memray = self._memray, None
            native = window.close()[: self.top]
        stats = site_stats("user", self._filters)
        if self._baseline is None:
            ranked = sorted(stats.items(), key=lambda kv: (-kv[1][0], kv[0]))[: self.top]
            python = tuple((s, b, c) for s, (b, c) in ranked)
        else:
            python = tuple(growth(self._baseline, stats, self.top))
        self._baseline = None
        del stats
        # The holders of what the user's line that kept most keeps, when the type that
        # grew most is not the user's class: a library's objects in flight (RLlib's
        # episode buffers) grow over a capture too, and their holders are the library's.
        kept: list[Any] = []
        user_site = next((s for s, _, _ in python if not is_library_site(s)), None)
        if (self.holders and user_site is not None and heap_walk_safe()
                and (grown_type is None or is_library_type(type_name(grown_type)))):
            kept = _kept_at(user_site, self.holders_timeout_seconds)
        self._release_tracing()
        chains: tuple[Chain, ...] = ()
        if kept:
            chains = tuple(referrer_chains(kept, samples=_KEPT_CONTAINERS,
                                           timeout_seconds=self.holders_timeout_seconds))
        elif self.holders and grown_type is not None and heap_walk_safe():
            chains = tuple(referrer_chains(grown_type, samples=2,
                                           timeout_seconds=self.holders_timeout_seconds))
        del kept
        self._started_at = None
        return Culprits(python, tuple(native), tuple(types), chains, duration, tuple(notes))

    def abandon(self) -> None:
        """Close everything without a result (the Prober stops mid-capture)."""
        if self._memray is not None:
            self._memray.abandon()
            self._memray = None
        self._release_tracing()
        self._baseline = self._types = None
        self._started_at = None

    def _release_tracing(self) -> None:
        if self._tracing:
            self._tracing = False
            release_tracing()


def capture_culprits(
    duration_seconds: float,
    workload: Callable[[], Any] | None = None,
    **options: Any,
) -> Culprits:
    """Open a capture, run ``workload()`` over and over (or sleep) for ``duration_seconds``,
    and return the culprits. For tests, the CLI and a process without a loop to hook;
    options are :class:`CulpritCapture`'s."""
    capture = CulpritCapture(duration_seconds=duration_seconds, **options).start()
    try:
        while not capture.due():
            if workload is not None:
                workload()
            else:
                time.sleep(min(0.05, duration_seconds))
        return capture.finish()
    finally:
        capture.abandon()
