"""What a report keeps of one process's samples, in memory bounded whatever their number.

``memprobe report`` reads files that may hold days of samples. It keeps, per process,
what the live leak alarm keeps, so that both judge alike:

- the whole-process metrics at every time scale (:class:`memprobe.Tiers`, fixed memory
  per metric): the verdicts on them are those of the whole samples;
- the latest :data:`WINDOW_SAMPLES` samples at full resolution, the keys a verdict reads
  only, their values unboxed (:class:`Window`): the tracemalloc sites and object types,
  the tracing windows and memprobe's own memory are judged on these, as the live alarm
  judges them on a Prober's history (1,000 samples by default);
- per metric shown: its first, last and peak values, and its points thinned to at most
  :data:`PLOT_POINTS` (every other one dropped each time they fill), for the plot and
  the point where a leak was first seen (exact up to that many samples);
- the latest full collections of the gc probe (the evidence on a count of live blocks:
  :mod:`memprobe.leak._garbage`);
- the growth per phase, the first :data:`memprobe.report._phase_growth.MAX_MARKS` marks and
  spans, the first :data:`MAX_CAPTURES` lines of the alarm's capture, the last two
  samples.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from .. import keys
from .._jsonl_fields import HOLDERS
from .._sample import Sample
from ..leak._garbage import FullCollections
from ..leak._kinds import DEFAULT_METRICS, TRACED
from ..leak._series import judged_keys
from ..leak._tiers import Tiers
from ._phase_growth import MarkTally, PhaseTally

#: Samples judged at full resolution: the default ``history`` of a Prober, whose live
#: alarm judges the sites and types on that many.
WINDOW_SAMPLES = 1000
#: Points kept per metric for the plot and the point of detection.
PLOT_POINTS = 2048
#: Lines of the alarm's capture kept (the first).
MAX_CAPTURES = 20
#: Referrer chains kept (the first distinct ones), each cut at 600 characters.
MAX_HOLDERS = 5
#: Metrics whose growth per phase is kept (the report shows the first 4 present).
PHASE_METRICS = ("process/rss_bytes", "tracemalloc/filtered_bytes",
                 "tracemalloc/traced_bytes", "objects/total_count", "process/num_fds")
_BATCH = 256  # samples fed to the tiers at once


class Thinned:
    """A metric's points ``(x, time, value)``, at most :data:`PLOT_POINTS`: when full,
    every other point is dropped and from then on only every other point is kept."""

    __slots__ = ("_seen", "_stride", "ts", "xs", "ys")

    def __init__(self) -> None:
        self.xs: array[float] = array("d")
        self.ts: array[float] = array("d")
        self.ys: array[float] = array("d")
        self._stride = 1
        self._seen = 0

    def append(self, x: float, t: float, y: float) -> None:
        seen = self._seen
        self._seen = seen + 1
        if seen % self._stride:
            return
        if len(self.xs) >= PLOT_POINTS:
            self.xs, self.ts, self.ys = self.xs[::2], self.ts[::2], self.ys[::2]
            self._stride *= 2
            if seen % self._stride:
                return
        self.xs.append(x)
        self.ts.append(t)
        self.ys.append(y)

    @property
    def exact(self) -> bool:
        """Every point is kept."""
        return self._stride == 1


class Window:
    """The latest samples, the keys ``keep`` accepts only: each as its time, step, pid,
    keys (one tuple shared by consecutive samples with the same keys) and values as
    floats in an array (what a verdict reads of them)."""

    __slots__ = ("_keep", "_keys", "_rows")

    def __init__(self, size: int, keep: Callable[[str], bool]) -> None:
        self._rows: deque[tuple[float, int | None, int, tuple[str, ...], array[float]]] = (
            deque(maxlen=size))
        self._keep = keep
        self._keys: tuple[str, ...] = ()

    def append(self, s: Sample) -> None:
        keep = self._keep
        picked = [(k, v) for k, v in s.values.items() if keep(k)]
        names = tuple(k for k, _ in picked)
        if names == self._keys:
            names = self._keys
        else:
            self._keys = names
        self._rows.append((s.time_seconds, s.step, s.pid, names,
                           array("d", [float(v) for _, v in picked])))

    def __len__(self) -> int:
        return len(self._rows)

    def times(self) -> Iterator[float]:
        """The samples' times, oldest first."""
        return (row[0] for row in self._rows)

    def __iter__(self) -> Iterator[Sample]:
        for t, step, pid, names, values in self._rows:
            yield Sample(t, step, pid, dict(zip(names, values)))


class MetricStats:
    """First, last and peak value of a metric, and its thinned points."""

    __slots__ = ("end", "peak", "points", "start")

    def __init__(self, y: float) -> None:
        self.start = self.end = self.peak = y
        self.points = Thinned()


class RunDigest:
    """One process's samples, fed in time order (:meth:`add`), kept in bounded memory.

    The prefix of the keys is that of the first sample that has one
    (:func:`memprobe.keys.infer_prefix`); samples wait for it up to
    :data:`WINDOW_SAMPLES`, after which it is ``memprobe``.
    """

    def __init__(self, prefix: str | None = None) -> None:
        """:param prefix: the prefix of the keys, when known (default: inferred)."""
        self.count = 0
        self.first_seconds = 0.0
        self.last_seconds = 0.0
        self.prefix: str | None = None
        self._early: list[Sample] = []  # samples before the prefix is known
        self.tiers = Tiers()
        self.window = Window(WINDOW_SAMPLES, lambda key: False)
        self.full_collections = FullCollections("")
        self.stats: dict[str, MetricStats] = {}
        self.captures: list[Sample] = []
        self.capture_steps: list[int] = []  # per capture: the samples taken while it was open
        self.holders: list[str] = []
        self.last: list[Sample] = []  # the last two samples
        self.phases: PhaseTally | None = None
        self.marks = MarkTally()
        self._pending: list[Sample] = []
        if prefix is not None:
            self._start(prefix)

    # -- feeding -------------------------------------------------------------------------
    def add(self, sample: Sample) -> None:
        """The next sample of the process, in time order."""
        if self.prefix is None:
            prefix = keys.infer_prefix(sample.values)
            if prefix is None and len(self._early) < WINDOW_SAMPLES:
                self._early.append(sample)
                return
            self._start(keys.DEFAULT_PREFIX if prefix is None else prefix)
        self._add(sample)

    def _start(self, prefix: str) -> None:
        self.prefix = prefix
        head = keys.prefix_path(prefix)
        self._shown = [(head + m, m) for m in DEFAULT_METRICS]
        self.window = Window(WINDOW_SAMPLES, judged_keys(prefix))
        self.full_collections = FullCollections(prefix)
        store = {head + m for m in DEFAULT_METRICS}
        self._keep_tiers = store.__contains__
        self._capture_key = keys.make_key(prefix, "capture", "duration_seconds")
        self._survivors_key = keys.make_key(prefix, "tracemalloc", "survivors_bytes")
        self.windowed = False  # tracemalloc ran windowed: traced bytes are not judged
        self.phases = PhaseTally([head + m for m in PHASE_METRICS])
        early, self._early = self._early, []
        for s in early:
            self._add(s)

    def _add(self, s: Sample) -> None:
        i = self.count
        self.count = i + 1
        t = s.time_seconds
        if not i:
            self.first_seconds = t
        self.last_seconds = t
        values = s.values
        x = float(s.step if s.step is not None else i)
        stats = self.stats
        for key, _ in self._shown:
            v = values.get(key)
            if v is None:
                continue
            y = float(v)
            st = stats.get(key)
            if st is None:
                st = stats[key] = MetricStats(y)
            else:
                st.end = y
                if y > st.peak:
                    st.peak = y
            st.points.append(x, t, y)
        if self._capture_key in values and len(self.captures) < MAX_CAPTURES:
            self.captures.append(s)
            start = t - float(values[self._capture_key])
            self.capture_steps.append(sum(1 for x in self.window.times() if start <= x <= t))
        if s.labels:
            text = s.labels.get(HOLDERS)
            if text and len(self.holders) < MAX_HOLDERS:
                for chain in text.splitlines():
                    chain = chain[:600]
                    if chain not in self.holders and len(self.holders) < MAX_HOLDERS:
                        self.holders.append(chain)
        if not self.windowed and self._survivors_key in values:
            self.windowed = True
        assert self.phases is not None
        self.phases.add(s)
        self.marks.add(s)
        self.last = [*self.last[-1:], s]
        self.full_collections.add(x, values)
        self.window.append(s)
        self._pending.append(s)
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            assert self.prefix is not None
            self.tiers.feed(self._pending, self.prefix, self._keep_tiers)
            self._pending.clear()

    def finish(self) -> RunDigest:
        """Feed what waits; call once every sample is added."""
        if self.prefix is None:
            self._start(keys.DEFAULT_PREFIX)
        self._flush()
        if self.windowed:  # a window's traced bytes are no series of the process's memory
            self.tiers.series.pop(keys.prefix_path(self.prefix or "") + TRACED, None)
        return self

    # -- reading -------------------------------------------------------------------------
    @property
    def span_seconds(self) -> float:
        """Seconds from the first sample to the last."""
        return self.last_seconds - self.first_seconds if self.count else 0.0

    def window_samples(self) -> Iterator[Sample]:
        """The latest samples, the keys a verdict reads only."""
        return iter(self.window)

    def judged_samples(self) -> list[Sample]:
        """The latest samples (:meth:`window_samples`), led by the alarm's capture line
        when it is older than all of them: then by one empty sample per sample taken
        while it was open (its steps, which its evidence is divided by) and the line.
        A run that goes on for more than :data:`WINDOW_SAMPLES` samples after its
        alarm keeps the kind and the culprit the capture told."""
        window = list(self.window)
        if not self.captures or (window and self.captures[-1].time_seconds
                                 >= window[0].time_seconds):
            return window
        cap, steps = self.captures[-1], self.capture_steps[-1]
        end = cap.time_seconds
        start = end - float(cap.values[self._capture_key])
        lead = [Sample(start + (end - start) * (i + 1) / (steps + 1), None, cap.pid, {})
                for i in range(steps)]
        return [*lead, cap, *window]

    def series(self, key: str) -> tuple[Sequence[float], Sequence[float], Sequence[float]]:
        """``(xs, times, values)`` of a metric shown (thinned); empty when absent."""
        st = self.stats.get(key)
        if st is None:
            return (), (), ()
        p = st.points
        return p.xs, p.ts, p.ys


def digest_of(samples: Sequence[Sample], prefix: str | None = None) -> RunDigest:
    """The digest of samples held in memory (sorted by time first, as a report reads them)."""
    digest = RunDigest(prefix)
    for s in sorted(samples, key=lambda s: s.time_seconds):
        digest.add(s)
    return digest.finish()
