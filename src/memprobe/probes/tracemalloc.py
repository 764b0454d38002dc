"""``tracemalloc``: traced memory and the allocation sites that hold and grow it."""

from __future__ import annotations

import heapq
import time
import tracemalloc
import weakref
from typing import Any

from .._errors import ConfigError, ProbeError, show
from .._flatten import SiteMap
from .._sitestats import GROUP_BY, SiteGrouper, Stats, default_filters
from .._tracing import (
    acquire_tracing,
    forget_stopped_tracing,
    release_collected,
    release_tracing,
    started_by_memprobe,
)
from ..hookspecs import hookimpl
from ..keys import is_library_site
from ..metrics import Metric

#: Frames the probe traces by default with ``group_by="user"``, all the time or in
#: windows: enough for ``json.loads`` (three frames of the json package) or a numpy or
#: torch factory (one) under the user's line, at about twice the cost of one frame on
#: allocation-bound code and 1.35x on torch (docs/leaks.md, benchmarks/culprit_frames.py).
DEFAULT_NFRAME = 4
#: Frames traced by the alarm's capture and the leak checks: open a few seconds, once.
CAPTURE_NFRAME = 16


class TracemallocProbe:
    """Traced and peak bytes, the top-N allocation sites and the sites that grew most.

    Starts tracing (with ``nframe`` frames) only if nothing traces yet, and
    stops only what it started. Sampling copies the traces: its cost grows
    with the number of traced blocks (tens of ms at 100k blocks; about a second of
    CPU once torch is imported under tracing, 500,000 blocks, of which the copy
    itself is half; each distinct traceback's site is worked out once and kept
    between samples: docs/performance.md), and tracing itself slows allocation, so
    give it an ``every``, ``interval_seconds`` or the Prober a ``budget``.

    Windowed mode (``window_steps=W, period_steps=P``): tracing runs only for
    W of every P samples of this probe. At sample ``k*P`` tracing starts; at
    sample ``k*P + W`` the live traced blocks (allocated during the window and
    still alive) are grouped by site into ``survivors/<site>/...``, then
    tracing stops. Allocation runs at full speed the other ``P - W`` samples.
    With ``max_tracing_fraction=f`` as well, a window that took ``d`` seconds
    of the process's CPU time is followed by at least ``d / f - d`` CPU seconds
    without tracing (the next window waits for them, past ``P``): tracing runs
    during at most ``f`` of the process's work, so a loop that tracing slows by
    any factor ``s`` while it runs loses at most ``f * (1 - 1/s)`` of its speed
    (in an RLlib EnvRunner, ``s`` is about 8 with 4 frames: docs/rllib.md). CPU
    time, not wall time: a process that waits between bursts of work (an
    EnvRunner while the Learner trains) would otherwise have its waits count
    as untraced work, and trace more of its work than ``f``. The first window
    (the process warming up) sets no pause.

    Sites are named where the user can act (``group_by="user"``, the default):
    the user's own line, then the library line that allocated
    (``app.py:12--numpy/_core/numeric.py:232``). That needs the frames between
    them: ``nframe`` is :data:`DEFAULT_NFRAME` by default (each traced frame costs
    on every allocation; measured in docs/leaks.md).
    """

    metrics = {
        "filtered_bytes": Metric(
            "traced memory after the probe's filters (memprobe's own packages, tracemalloc, "
            "importlib and ``exclude`` left out); what leak diagnosis judges", "bytes",
            judged=True, growth="python"),
        "traced_bytes": Metric("memory traced by tracemalloc now", "bytes",
                               judged=True, growth="python"),
        "peak_bytes": Metric("peak traced memory since the previous sample", "bytes"),
        "overhead_bytes": Metric("memory tracemalloc itself uses", "bytes"),
        "blocks_count": Metric("live traced blocks (after filters)", "count"),
        "top/<site>/size_bytes": Metric("live bytes allocated at the site", "bytes"),
        "top/<site>/count": Metric("live blocks allocated at the site", "count"),
        "growth/<site>/size_bytes": Metric(
            "increase of the site's live bytes since the previous sample", "bytes", "interval"),
        "growth/<site>/count": Metric(
            "change of the site's live blocks since the previous sample", "count", "interval"),
        "window_active": Metric("windowed mode: 1 while a tracing window is open, else 0"),
        "survivors_bytes": Metric(
            "windowed mode, at a window's end: bytes allocated in the window and still alive",
            "bytes"),
        "survivors_count": Metric("windowed mode, at a window's end: such blocks", "count"),
        "survivors/<site>/size_bytes": Metric("windowed mode: surviving bytes by site", "bytes"),
        "survivors/<site>/count": Metric("windowed mode: surviving blocks by site", "count"),
    }

    def __init__(
        self,
        *,
        top: int = 10,
        nframe: int | None = None,
        group_by: str = "user",
        exclude: list[str] | tuple[str, ...] = (),
        window_steps: int | None = None,
        period_steps: int | None = None,
        max_tracing_fraction: float | None = None,
    ) -> None:
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise ConfigError("tracemalloc.top", f"must be an int >= 0, got {show(top)}")
        if nframe is not None and (
            not isinstance(nframe, int) or isinstance(nframe, bool) or not 1 <= nframe <= 100
        ):
            raise ConfigError(
                "tracemalloc.nframe", f"must be None or an int from 1 to 100, got {show(nframe)}"
            )
        if group_by not in GROUP_BY:
            raise ConfigError(
                "tracemalloc.group_by", f"must be one of {GROUP_BY}, got {show(group_by)}"
            )
        if group_by == "user" and nframe == 1:
            raise ConfigError(
                "tracemalloc.nframe", "group_by='user' names the user's line above the "
                "library line that allocated, which one traced frame cannot reach: give "
                "nframe >= 2 (or leave it out), or group_by='lineno' for the allocating line")
        if isinstance(exclude, str) or not all(  # type: ignore[unreachable]
            isinstance(p, str) for p in exclude
        ):
            raise ConfigError(
                "tracemalloc.exclude", f"must be a list of filename patterns, got {show(exclude)}"
            )
        if (window_steps is None) != (period_steps is None):
            raise ConfigError(
                "tracemalloc.window_steps",
                "window_steps and period_steps go together (trace W of every P samples)",
            )
        if window_steps is not None:
            for opt, v in (("window_steps", window_steps), ("period_steps", period_steps)):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ConfigError(f"tracemalloc.{opt}", f"must be an int >= 1, got {show(v)}")
            if window_steps >= period_steps:  # type: ignore[operator]
                raise ConfigError(
                    "tracemalloc.window_steps",
                    f"must be less than period_steps ({period_steps}), got {window_steps}",
                )
        if max_tracing_fraction is not None:
            if window_steps is None:
                raise ConfigError(
                    "tracemalloc.max_tracing_fraction",
                    "bounds the time tracing windows run: give window_steps and period_steps")
            if (not isinstance(max_tracing_fraction, (int, float))
                    or isinstance(max_tracing_fraction, bool)
                    or not 0.0 < max_tracing_fraction <= 1.0):
                raise ConfigError(
                    "tracemalloc.max_tracing_fraction",
                    f"must be a fraction in (0, 1], got {show(max_tracing_fraction)}")
        self.window_steps = window_steps
        self.period_steps = period_steps
        self.max_tracing_fraction = max_tracing_fraction
        self._calls = 0
        # process_time() at the open window's start, and the earliest the next may open.
        self._opened_at = 0.0
        self._next_open_at = 0.0
        self.top = top
        if nframe is None:
            nframe = DEFAULT_NFRAME if group_by == "user" else 1
        self.nframe = nframe
        self.group_by = group_by
        self.exclude = tuple(exclude)
        self._filters = default_filters(self.exclude)
        # Each traceback's site, kept from one sample to the next (bounded: SiteGrouper).
        self._grouper: SiteGrouper | None = None
        self._previous: Stats | None = None
        self._active = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _acquire(self) -> None:
        acquire_tracing(self.nframe)
        self._active = True
        # Released if this probe is collected without stop(): memprobe._tracing.release_collected.
        self._finalizer = weakref.finalize(self, release_collected)

    def _release(self) -> None:
        self._active = False
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        release_tracing()

    def start(self) -> None:
        if self.window_steps is not None:
            return  # windowed: tracing starts with the first window, in sample()
        if not self._active:
            self._acquire()

    def stop(self) -> None:
        if self._active:
            self._release()
        self._previous = None
        self._grouper = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_active=False, _previous=None, _finalizer=None, _grouper=None)
        return state

    def _site_stats(self) -> Stats:
        if self._grouper is None:
            self._grouper = SiteGrouper(self.group_by, self._filters)
        return self._grouper.site_stats()

    def _sample_windowed(self) -> dict[str, Any]:
        """Trace W of every P samples; at a window's end, name the surviving sites."""
        phase = self._calls % self.period_steps  # type: ignore[operator]
        if phase == 0 and not self._active and time.process_time() < self._next_open_at:
            return {"window_active": 0}  # the last window's pause (max_tracing_fraction)
        self._calls += 1
        out: dict[str, Any] = {"window_active": int(self._active)}
        if phase == 0 and not self._active:
            self._acquire()
            self._opened_at = time.process_time()
            out["window_active"] = 1
        elif phase == self.window_steps and self._active:
            # Blocks traced now were allocated inside the window and outlived it.
            traced, _ = tracemalloc.get_traced_memory()
            stats = self._site_stats()
            self._release()
            # The first window (the first samples after start, while the process warms
            # up: first calls, caches filled) would set a pause out of scale with the rest.
            first = self._calls == self.window_steps + 1
            if self.max_tracing_fraction is not None and not first:
                now = time.process_time()
                self._next_open_at = (
                    self._opened_at + (now - self._opened_at) / self.max_tracing_fraction)
            out["window_active"] = 0
            out["survivors_bytes"] = sum(s for s, _ in stats.values())
            out["survivors_count"] = sum(c for _, c in stats.values())
            out["traced_bytes"] = traced
            if self.top:
                # The user's own sites first: a line that keeps small objects holding
                # native memory (a C buffer's address, a tensor) leaves a few hundred
                # bytes a window, which a library's blocks in flight (RLlib's episodes
                # not yet returned, at a dozen sites of kilobytes) would push out of
                # the top N, and the verdicts name the user's surviving lines.
                ranked = sorted(stats.items(), key=lambda kv: (
                    is_library_site(kv[0]), -kv[1][0], kv[0]))[: self.top]
                out["survivors"] = SiteMap(
                    (site, {"size_bytes": sz, "count": c}) for site, (sz, c) in ranked
                )
        return out

    def sample(self) -> dict[str, Any]:
        if self.window_steps is not None:
            return self._sample_windowed()
        if not self._active:
            self.start()
        if not tracemalloc.is_tracing():
            forget_stopped_tracing()
            raise ProbeError(
                "tracemalloc", "tracing was stopped under this probe (tracemalloc.stop() "
                "elsewhere in the process); its values would all be 0"
            )
        traced, peak = tracemalloc.get_traced_memory()
        if started_by_memprobe() and hasattr(tracemalloc, "reset_peak"):
            tracemalloc.reset_peak()
        stats = self._site_stats()
        out: dict[str, Any] = {
            "traced_bytes": traced,
            "filtered_bytes": sum(sz for sz, _ in stats.values()),
            "peak_bytes": peak,
            "overhead_bytes": tracemalloc.get_tracemalloc_memory(),
            "blocks_count": sum(c for _, c in stats.values()),
        }
        if self.top:
            ranked = largest(stats, self.top)
            out["top"] = SiteMap(
                (site, {"size_bytes": s, "count": c}) for site, (s, c) in ranked
            )
            out["growth"] = SiteMap(
                (site, {"size_bytes": ds, "count": dc})
                for site, ds, dc in growth(self._previous, stats, self.top)
            )
        self._previous = stats
        return out


def largest(stats: Stats, top: int) -> list[tuple[str, tuple[int, int]]]:
    """The ``top`` sites with the most live bytes, ties by name:
    ``sorted(stats.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]``.

    Without building an object per site (while tracing, each is traced: thousands of
    sites with numpy imported): the ``top``-th largest size comes from comparing the
    stats' own ``(size, count)`` tuples, and only sites at least that large are sorted.
    """
    if len(stats) > top > 0:
        floor = heapq.nlargest(top, stats.values())[-1][0]
        sites = [site for site in stats if stats[site][0] >= floor]
    else:
        sites = list(stats)
    return sorted(((site, stats[site]) for site in sites),
                  key=lambda kv: (-kv[1][0], kv[0]))[:top]


def growth(previous: Stats | None, current: Stats, top: int) -> list[tuple[str, int, int]]:
    """The ``top`` sites whose live bytes grew most from ``previous`` to ``current``."""
    if previous is None:
        return []
    deltas = []
    for site, (size, count) in current.items():
        ps, pc = previous.get(site, (0, 0))
        if size > ps:
            deltas.append((site, size - ps, count - pc))
    deltas.sort(key=lambda t: (-t[1], t[0]))
    return deltas[:top]


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("tracemalloc", TracemallocProbe)
