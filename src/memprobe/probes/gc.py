"""``gc``: the cyclic garbage collector's counts, statistics and time spent."""

from __future__ import annotations

import gc
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

from .._errors import ConfigError, show
from .._flatcode import FlatCode, Unusable, literal
from ..hookspecs import hookimpl
from ..metrics import Metric

# Bound at import: a program that patches time.perf_counter must not break the callback.
_perf_counter = time.perf_counter

#: The flat sampler re-reads ``gc.get_stats()`` after every collection (seen by the
#: probe's ``gc.callbacks`` hook) and at least this often, for collections that run
#: no callbacks (CPython's collection on a failed allocation) and for a hook that
#: something took out of ``gc.callbacks``.
STATS_MAX_AGE_SECONDS = 1e-3


def _gen_keys(i: int) -> tuple[str, str, str, str]:
    g = f"gen{i}"
    return (f"{g}/count", f"{g}/collections_count", f"{g}/collected_count",
            f"{g}/uncollectable_count")


_KEYS = tuple(_gen_keys(i) for i in range(8))


class GcProbe:
    """Per-generation object counts and collection statistics, garbage, collection time.

    It never forces a collection unless ``collect=True``.

    ``blocks=True`` adds ``allocated_blocks`` (``sys.getallocatedblocks()``):
    about one block per live small Python object, the cheap way to see retained
    objects accumulate, far cheaper than the objects probe's walk of every object
    (docs/performance.md).
    Collection time comes from a ``gc.callbacks`` hook installed by ``start()``
    and removed by ``stop()``.
    """

    metrics = {
        "gen<N>/count": Metric("allocations since generation N was last collected", "count"),
        "gen<N>/collections_count": Metric(
            "collections of generation N since the process started", "count", "counter"),
        "gen<N>/collected_count": Metric(
            "objects collected in generation N since the process started", "count", "counter"),
        "gen<N>/uncollectable_count": Metric(
            "uncollectable objects found in generation N since the process started",
            "count", "counter"),
        "garbage_count": Metric("len(gc.garbage)", "count"),
        "collection_seconds": Metric(
            "time spent in collections since the previous sample", "seconds", "interval"),
        "collection_seconds_total": Metric(
            "time spent in collections since the probe started", "seconds", "counter"),
        "collected_now_count": Metric(
            "objects freed by the forced collection (collect=True)", "count", "interval"),
        "allocated_blocks": Metric(
            "memory blocks Python's small-object allocator has in use: about one per live "
            "small object (blocks=True)", "count"),
    }

    def __init__(self, *, collect: bool = False, blocks: bool = False) -> None:
        if not isinstance(collect, bool):
            raise ConfigError("gc.collect", f"must be a bool, got {show(collect)}")
        if not isinstance(blocks, bool):
            raise ConfigError("gc.blocks", f"must be a bool, got {show(blocks)}")
        self.collect = collect
        self.blocks = blocks
        self._t0 = 0.0
        self._spent = 0.0
        self._spent_reported = 0.0
        self._collections = 0  # collections that ended since start(), seen by the callback
        self._installed = False
        self._callback: Callable[[str, dict[str, Any]], None] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _on_gc(self, phase: str) -> None:
        if phase == "start":
            self._t0 = _perf_counter()
        else:
            self._collections += 1
            if self._t0:
                self._spent += _perf_counter() - self._t0
                self._t0 = 0.0

    def start(self) -> None:
        if not self._installed:
            # gc.callbacks holds a function that holds only a weak reference to the
            # probe, and the probe's finalizer removes it: a probe collected without
            # stop() (a Prober nobody stops) leaves nothing behind in gc.callbacks.
            callback = _make_callback(weakref.ref(self))
            gc.callbacks.append(callback)
            self._callback = callback
            self._finalizer = weakref.finalize(self, _remove_callback, callback)
            self._installed = True

    def stop(self) -> None:
        if self._installed:
            if self._finalizer is not None:
                self._finalizer.detach()
            _remove_callback(self._callback)
            self._callback = self._finalizer = None
            self._installed = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_installed=False, _callback=None, _finalizer=None)
        return state

    def sample(self) -> dict[str, Any]:
        # Flat keys (``gen0/count``): the same flat metrics as nested dicts, built faster.
        out: dict[str, Any] = {}
        if self.collect:
            out["collected_now_count"] = gc.collect()
        counts = gc.get_count()
        n = len(counts)
        for i, st in enumerate(gc.get_stats()):
            k_count, k_collections, k_collected, k_uncollectable = (
                _KEYS[i] if i < len(_KEYS) else _gen_keys(i)
            )
            out[k_collected] = st.get("collected", 0)
            out[k_collections] = st.get("collections", 0)
            out[k_count] = counts[i] if i < n else 0
            out[k_uncollectable] = st.get("uncollectable", 0)
        out["garbage_count"] = len(gc.garbage)
        if self.blocks:
            out["allocated_blocks"] = sys.getallocatedblocks()
        spent = self._spent
        out["collection_seconds"] = spent - self._spent_reported
        out["collection_seconds_total"] = spent
        self._spent_reported = spent
        return out


    def _flat_code(self, head: str) -> FlatCode | None:
        """The flat sampler as source (``head`` is ``<prefix>/<name>/``), for CPython's
        three generations. ``gc.get_stats()`` is read again only when a collection has
        ended since the last read (see ``STATS_MAX_AGE_SECONDS``); the generation counts
        are read in every sample."""
        if self.collect or self.blocks or len(gc.get_count()) != 3 or len(gc.get_stats()) != 3:
            return None
        (a0, a1, a2, a3), (b0, b1, b2, b3), (c0, c1, c2, c3) = (
            tuple(literal(head + k) for k in keys) for keys in _KEYS[:3])
        k_seconds, k_total, k_garbage = (literal(head + m) for m in (
            "collection_seconds", "collection_seconds_total", "garbage_count"))
        body = f"""
$counts = $get_count()
if len($counts) != 3:
    raise $Unusable
$spent = $probe._spent
$collections = $probe._collections
if $collections != $read[0] or $now - $read[1] >= $max_age:
    $stats = $get_stats()
    if len($stats) != 3:
        raise $Unusable
    $s0, $s1, $s2 = $stats
    $cache.clear()
    $cache.update({{
        {a2}: $s0["collected"], {a1}: $s0["collections"], {a3}: $s0["uncollectable"],
        {b2}: $s1["collected"], {b1}: $s1["collections"], {b3}: $s1["uncollectable"],
        {c2}: $s2["collected"], {c1}: $s2["collections"], {c3}: $s2["uncollectable"],
    }})
    $read[0] = $collections
    $read[1] = $now
$seconds = $spent - $probe._spent_reported
$probe._spent_reported = $spent
$n0, $n1, $n2 = $counts
"""
        items = (f"{k_seconds}: $seconds, {k_total}: $spent, {k_garbage}: len($garbage), "
                 f"{a0}: $n0, {b0}: $n1, {c0}: $n2, **$cache")
        # The statistics of CPython's three generations as of the last read: they change
        # only in a collection, so they are read again only after one (or when too old);
        # read holds self._collections and the clock at that read.
        return FlatCode(body, items, {
            "probe": self, "get_count": gc.get_count, "get_stats": gc.get_stats,
            "garbage": gc.garbage, "Unusable": Unusable, "max_age": STATS_MAX_AGE_SECONDS,
            "cache": {}, "read": [-1, float("-inf")]})


def _make_callback(
    ref: weakref.ReferenceType[GcProbe],
) -> Callable[[str, dict[str, Any]], None]:
    def callback(phase: str, info: dict[str, Any]) -> None:
        try:
            probe = ref()
            if probe is not None:
                probe._on_gc(phase)
        except Exception:  # never an "Exception ignored" traceback in the user's stderr
            pass

    return callback


def _remove_callback(callback: Any) -> None:
    try:
        gc.callbacks.remove(callback)
    except ValueError:
        pass


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("gc", GcProbe)
