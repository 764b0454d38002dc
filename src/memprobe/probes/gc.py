"""``gc``: the cyclic garbage collector's counts, statistics and time spent."""

from __future__ import annotations

import gc
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

from .._errors import ConfigError, show
from ..hookspecs import hookimpl
from ..metrics import Metric

# Bound at import: a program that patches time.perf_counter must not break the callback.
_perf_counter = time.perf_counter

#: ``sample()`` re-reads ``gc.get_stats()`` after every collection (seen by the
#: probe's ``gc.callbacks`` hook) and at least this often, for collections that run
#: no callbacks (CPython's collection on a failed allocation) and for a hook that
#: something took out of ``gc.callbacks``.
STATS_MAX_AGE_SECONDS = 1e-3


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
        "garbage_count": Metric("len(gc.garbage)", "count", judged=True, growth="objects"),
        "collection_seconds": Metric(
            "time spent in collections since the previous sample", "seconds", "interval"),
        "collection_seconds_total": Metric(
            "time spent in collections since the probe started", "seconds", "counter"),
        "collected_now_count": Metric(
            "objects freed by the forced collection (collect=True)", "count", "interval"),
        "allocated_blocks": Metric(
            "memory blocks Python's small-object allocator has in use: about one per live "
            "small object (blocks=True)", "count", judged=True, growth="objects"),
        "full/collections_count": Metric(
            "collections of the oldest generation since the probe started (blocks=True)",
            "count", "counter"),
        "full/blocks_after": Metric(
            "allocated_blocks right after the latest collection of the oldest generation, "
            "when cyclic garbage is freed (blocks=True; 0 before the first)", "count"),
    }

    def __init__(self, *, collect: bool = False, blocks: bool = False) -> None:
        if not isinstance(collect, bool):
            raise ConfigError("gc.collect", f"must be a bool, got {show(collect)}")
        if not isinstance(blocks, bool):
            raise ConfigError("gc.blocks", f"must be a bool, got {show(blocks)}")
        self.collect = collect
        self.blocks = blocks
        # With either option, the row's metrics in name order, as the keys of a mapping
        # come out of flatten; None: the row as built.
        self._order: tuple[int, ...] | None = None
        if collect or blocks:
            columns = _columns(len(gc.get_stats()), collect, blocks)
            self._order = tuple(sorted(range(len(columns)), key=columns.__getitem__))
        self._t0 = 0.0
        self._spent = 0.0
        self._spent_reported = 0.0
        self._collections = 0  # collections that ended since start(), seen by the callback
        # Full collections (of the oldest generation) seen by the callback, and the blocks
        # in use right after the latest: the evidence that tells cyclic garbage awaiting
        # such a collection from objects kept (memprobe.leak._garbage).
        self._full = 0
        self._full_blocks = 0
        self._oldest = len(gc.get_stats()) - 1
        # gc.get_stats() as of its last read (three numbers per generation), and the
        # collections count and the clock at that read.
        self._stats: tuple[int, ...] = ()
        self._stats_collections = -1
        self._stats_time = float("-inf")
        self._installed = False
        self._callback: Callable[[str, dict[str, Any]], None] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _on_gc(self, phase: str, generation: int) -> None:
        if phase == "start":
            self._t0 = _perf_counter()
        else:
            self._collections += 1
            if self._t0:
                self._spent += _perf_counter() - self._t0
                self._t0 = 0.0
            if self.blocks and generation >= self._oldest:
                self._full += 1
                self._full_blocks = sys.getallocatedblocks()

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
        state.update(_installed=False, _callback=None, _finalizer=None, _stats_collections=-1)
        return state

    @property
    def columns(self) -> tuple[str, ...]:
        """The metrics of the row ``sample()`` returns, in its order."""
        columns = _columns(len(gc.get_stats()), self.collect, self.blocks)
        return columns if self._order is None else tuple(columns[i] for i in self._order)

    def sample(self) -> tuple[int | float, ...]:
        """A row of :attr:`columns`. ``gc.get_stats()`` is read again only when a
        collection has ended since the last read, or that read is older than
        ``STATS_MAX_AGE_SECONDS``; the generation counts are read every time."""
        collected_now = (gc.collect(),) if self.collect else ()
        now = _perf_counter()
        collections = self._collections
        if collections != self._stats_collections or now - self._stats_time >= \
                STATS_MAX_AGE_SECONDS:
            self._stats = tuple(
                st.get(k, 0) for st in gc.get_stats()
                for k in ("collected", "collections", "uncollectable"))
            self._stats_collections = collections
            self._stats_time = now
        spent = self._spent
        seconds = spent - self._spent_reported
        self._spent_reported = spent
        blocks = (sys.getallocatedblocks(), self._full, self._full_blocks) if self.blocks else ()
        row = (*collected_now, seconds, spent, len(gc.garbage), *gc.get_count(),
               *self._stats, *blocks)
        return row if self._order is None else tuple(row[i] for i in self._order)


def _columns(generations: int, collect: bool, blocks: bool) -> tuple[str, ...]:
    """The metrics of the gc probe's row for ``generations`` generations, in its order:
    what changes in every sample first, each generation's statistics after."""
    return (
        *(("collected_now_count",) if collect else ()),
        "collection_seconds", "collection_seconds_total", "garbage_count",
        *(f"gen{i}/count" for i in range(generations)),
        *(f"gen{i}/{stat}_count" for i in range(generations)
          for stat in ("collected", "collections", "uncollectable")),
        *(("allocated_blocks", "full/collections_count", "full/blocks_after") if blocks else ()),
    )


def _make_callback(
    ref: weakref.ReferenceType[GcProbe],
) -> Callable[[str, dict[str, Any]], None]:
    def callback(phase: str, info: dict[str, Any]) -> None:
        try:
            probe = ref()
            if probe is not None:
                probe._on_gc(phase, info.get("generation", -1))
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
