"""``heap``: a sampled heap profile, cheap enough to leave on, naming the lines that hold memory.

The C extension :mod:`memprobe._heapsample` samples Python's allocations by bytes
(about one allocation per ``interval_bytes`` allocated, weighted to make the estimate
unbiased) and keeps each live sample's stack; this probe reads the live samples
grouped by site, as the tracemalloc probe names its sites (the user's line first).
Without the extension (installed with ``MEMPROBE_NO_EXTENSION=1``, or built on a
machine without a C compiler) the probe warns once and reports nothing.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from .._errors import ConfigError, MemprobeWarning, show
from .._flatten import SiteMap
from .._sitestats import SiteGrouper, Stats, default_filters
from ..hookspecs import hookimpl
from ..metrics import Metric
from .tracemalloc import largest

try:
    _heapsample: Any = importlib.import_module("memprobe._heapsample")
except ImportError:  # built without the extension: the plain-Python install
    _heapsample = None

#: The mean bytes allocated between two samples. At 512 KiB the sampler costs about
#: what its hooks cost alone, and a site holding 50 MB is estimated within about 15%
#: (the error goes as sqrt(interval / live bytes)): docs/performance.md, docs/probes.md.
DEFAULT_INTERVAL_BYTES = 512 * 1024
#: Sites named per sample (``top/<site>/live_bytes``).
DEFAULT_TOP = 10

_warned: list[bool] = []


class HeapProbe:
    """Estimated live bytes of Python's heap, in all and by allocation site, from a sample.

    Every allocation through ``PyMem_Malloc`` and ``PyObject_Malloc`` (every Python
    object, and buffers such as ``bytearray``'s) counts down a random number of bytes
    of mean ``interval_bytes``; the allocation that crosses zero is sampled with its
    stack and weighted by its chance of being sampled. The live samples' weights give
    the live bytes at each site, at any moment, with no window: a leaking line's
    ``live_bytes`` climbs, a churning line's stays near zero. Not seen: memory C code
    takes with ``malloc`` directly (numpy's array buffers, torch's tensors): the
    ``malloc`` and ``memray`` probes see those.

    One sampler per process: a second heap probe shares it (the later interval wins).
    Its tables (at most 16,384 stacks of 16 frames, 4.5 MiB, and 32 bytes per live
    sample) are memprobe's own, reported as ``own_bytes``.
    """

    metrics = {
        "live_bytes": Metric("estimated live bytes of the sampled allocations", "bytes",
                             judged=True, growth="python"),
        "top/<site>/live_bytes": Metric(
            "estimated live bytes allocated at a site (the user's line first)", "bytes"),
        "sampled": Metric("live samples", "count"),
        "interval_bytes": Metric("mean bytes allocated between two samples", "bytes"),
        "own_bytes": Metric("memory the sampler's own tables hold (memprobe's)", "bytes"),
        "dropped_count": Metric(
            "samples not recorded because a table was full, since the start", "count",
            "counter"),
    }

    def __init__(self, *, interval_bytes: int = DEFAULT_INTERVAL_BYTES,
                 top: int = DEFAULT_TOP) -> None:
        if isinstance(interval_bytes, bool) or not isinstance(interval_bytes, int) or not (
                1024 <= interval_bytes <= 1 << 40):
            raise ConfigError("heap.interval_bytes",
                              f"must be an int from 1024 to 2**40, got {show(interval_bytes)}")
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 10_000:
            raise ConfigError("heap.top", f"must be an int from 0 to 10000, got {show(top)}")
        self.interval_bytes = interval_bytes
        self.top = top
        self._grouper: SiteGrouper | None = None
        self._started = False

    def start(self) -> None:
        if _heapsample is None:
            if not _warned:
                _warned.append(True)
                warnings.warn(
                    "heap: memprobe was installed without its C extension "
                    "(memprobe._heapsample), so the sampled heap is off; reinstall with "
                    "a C compiler to name leaking lines cheaply", MemprobeWarning, stacklevel=2)
            return
        if not self._started:
            _heapsample.start(float(self.interval_bytes))
            self._started = True

    def stop(self) -> None:
        if self._started and _heapsample is not None:
            _heapsample.stop()
        self._started = False
        self._grouper = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_grouper=None, _started=False)
        return state

    def site_stats(self) -> Stats:
        """The live samples by site: ``{site: (estimated live bytes, live samples)}``."""
        if _heapsample is None or not self._started:
            return {}
        if self._grouper is None:
            self._grouper = SiteGrouper("user", default_filters())
        # The sampler gives each stack's samples as one "trace": its frames most recent
        # first, as tracemalloc's raw traces, so the sites are tracemalloc's names.
        traces = [(0, int(live), frames, len(frames)) for frames, live, _n in
                  _heapsample.snapshot()]
        stats = self._grouper.stats(traces)
        _heapsample.compact()
        return stats

    def sample(self) -> dict[str, Any]:
        if _heapsample is None or not self._started:
            return {}
        info = _heapsample.stats()
        stats = self.site_stats()
        out: dict[str, Any] = {
            "live_bytes": sum(size for size, _ in stats.values()),
            "sampled": info["live_samples"],
            "interval_bytes": int(info["interval_bytes"]),
            "own_bytes": info["own_bytes"],
            "dropped_count": info["dropped"],
        }
        if self.top:
            out["top"] = SiteMap(
                (site, {"live_bytes": size}) for site, (size, _) in largest(stats, self.top))
        return out


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("heap", HeapProbe)
