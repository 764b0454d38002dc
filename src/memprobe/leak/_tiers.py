"""A metric's history at every time scale, in memory fixed when it is made.

The last :data:`RAW` points are kept as they are. Older ones are kept in
:data:`TIERS` coarser tiers, each a ring of :data:`BINS` bins: a bin of tier 1
is the median of :data:`FIRST` consecutive points, a bin of tier ``k + 1`` the
median of :data:`FACTOR` consecutive bins of tier ``k`` (x, time and value each).
So tier ``k`` (from 0) spans the last ``BINS * FIRST * FACTOR**k`` points: 2,048,
8,192, 32,768... The top tier never drops a bin: when full, it merges its bins
two by two and doubles their width, so it always spans the whole run. A tier is
judged once it has 40 bins, when the tier below it has wrapped no more than a
fifth of the run ago: the longest scale judged always spans at least 80% of the run.

A check can judge the last minutes (the raw points), the last hours (a middle
tier) and the whole run (the top tier) in the same bounded memory: every
array is allocated when the series is made (:data:`BYTES_PER_SERIES`), and
nothing grows with the run's length.

A median of its bins, not their mean, so that one spike (a buffer that came
and went) does not move a bin; and the median of a few bins of a series that
grows in allocator steps follows the steps, which Theil-Sen across bins then
reads as the slope they make.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._sample import Sample
from ._series import sample_series

#: Points kept as they are (the shortest scale judged).
RAW = 512
#: Points per bin of tier 1.
FIRST = 16
#: Bins of tier ``k`` per bin of tier ``k + 1``.
FACTOR = 4
#: Bins each tier keeps.
BINS = 128
#: Coarser tiers; the top one spans the whole run.
TIERS = 7
#: The memory of one series's arrays, allocated when it is made.
BYTES_PER_SERIES = 8 * 3 * (RAW + FIRST + TIERS * BINS + (TIERS - 1) * FACTOR)


def _median(v: Sequence[float]) -> float:
    s = sorted(v)
    n = len(s)
    m = n // 2
    return s[m] if n % 2 else (s[m - 1] + s[m]) / 2.0


class _Ring:
    """At most ``size`` points (x, time, value), oldest first, in preallocated arrays."""

    __slots__ = ("n", "size", "start", "ts", "xs", "ys")

    def __init__(self, size: int) -> None:
        self.size = size
        self.xs = array("d", bytes(8 * size))
        self.ts = array("d", bytes(8 * size))
        self.ys = array("d", bytes(8 * size))
        self.start = 0
        self.n = 0

    def push(self, x: float, t: float, y: float) -> None:
        size = self.size
        if self.n < size:
            i = self.start + self.n
            self.n += 1
        else:
            i = self.start
            self.start += 1
        i %= size
        self.start %= size
        self.xs[i] = x
        self.ts[i] = t
        self.ys[i] = y

    def put(self, xs: Sequence[float], ts: Sequence[float], ys: Sequence[float]) -> None:
        """:meth:`push` each point in order, in slices: only the last ``size`` stay."""
        size = self.size
        n = len(xs)
        if n >= size:  # the ring holds the last size points, oldest first
            self.xs[:] = array("d", xs[n - size:])
            self.ts[:] = array("d", ts[n - size:])
            self.ys[:] = array("d", ys[n - size:])
            self.start, self.n = 0, size
            return
        j = 0
        while j < n:
            if self.n < size:  # free slots after the last point
                i = (self.start + self.n) % size
                take = min(n - j, size - self.n, size - i)
                self.n += take
            else:  # overwrite the oldest points
                i = self.start
                take = min(n - j, size - i)
                self.start = (i + take) % size
            self.xs[i:i + take] = array("d", xs[j:j + take])
            self.ts[i:i + take] = array("d", ts[j:j + take])
            self.ys[i:i + take] = array("d", ys[j:j + take])
            j += take

    def points(self) -> tuple[list[float], list[float], list[float]]:
        order = [(self.start + j) % self.size for j in range(self.n)]
        return ([self.xs[i] for i in order], [self.ts[i] for i in order],
                [self.ys[i] for i in order])

    def halve(self) -> None:
        """Merge the points two by two (medians of two: their means)."""
        xs, ts, ys = self.points()
        self.start = self.n = 0
        for j in range(0, len(xs) - 1, 2):
            self.push((xs[j] + xs[j + 1]) / 2, (ts[j] + ts[j + 1]) / 2, (ys[j] + ys[j + 1]) / 2)


class _Pending:
    """Points waiting to make one bin of the next tier."""

    __slots__ = ("n", "ts", "xs", "ys")

    def __init__(self, size: int) -> None:
        self.xs = array("d", bytes(8 * size))
        self.ts = array("d", bytes(8 * size))
        self.ys = array("d", bytes(8 * size))
        self.n = 0


class TieredSeries:
    """One metric's points at every scale (see the module docstring)."""

    __slots__ = ("_pending", "count", "pushes", "raw", "tiers", "verdicts")

    def __init__(self) -> None:
        self.count = 0  # points fed
        self.raw = _Ring(RAW)
        self.tiers = [_Ring(BINS) for _ in range(TIERS)]
        # _pending[k]: the points (k = 0) or bins of tier k waiting for the next bin
        self._pending = [_Pending(FIRST)] + [_Pending(FACTOR) for _ in range(TIERS - 1)]
        self.pushes = [0] * TIERS  # bins pushed into each tier: a tier unchanged is judged once
        #: The latest verdict on each tier, with what it was judged with (see judge_scales).
        self.verdicts: dict[int, tuple[Any, Any]] = {}

    def append(self, x: float, t: float, y: float) -> None:
        """Add one point (x: the step or sample index; t: unix seconds)."""
        self.count += 1
        self.raw.push(x, t, y)
        p = self._pending[0]
        i = p.n
        p.xs[i], p.ts[i], p.ys[i] = x, t, y
        p.n = i + 1
        if p.n == FIRST:
            p.n = 0
            self._bin(0, _median(p.xs), _median(p.ts), _median(p.ys))

    def extend(self, xs: Sequence[float], ts: Sequence[float], ys: Sequence[float]) -> None:
        """Add points in order: the same as :meth:`append` of each, in slices (the raw
        ring takes the last :data:`RAW` points at once, tier 0 a bin per
        :data:`FIRST` points), so that feeding a batch costs little per point."""
        n = len(xs)
        if n < FIRST:
            for x, t, y in zip(xs, ts, ys):
                self.append(x, t, y)
            return
        self.count += n
        self.raw.put(xs, ts, ys)
        p = self._pending[0]
        j = 0
        while j < n:
            take = min(FIRST - p.n, n - j)
            k = p.n
            p.xs[k:k + take] = array("d", xs[j:j + take])
            p.ts[k:k + take] = array("d", ts[j:j + take])
            p.ys[k:k + take] = array("d", ys[j:j + take])
            p.n = k + take
            j += take
            if p.n == FIRST:
                p.n = 0
                self._bin(0, _median(p.xs), _median(p.ts), _median(p.ys))

    def _bin(self, level: int, x: float, t: float, y: float) -> None:
        """Push a bin into tier ``level``, and on up when it completes one there."""
        while True:
            tier = self.tiers[level]
            top = level == TIERS - 1
            if top and tier.n == tier.size:
                tier.halve()
            tier.push(x, t, y)
            self.pushes[level] += 1
            if top:
                return
            level += 1
            p = self._pending[level]
            i = p.n
            p.xs[i], p.ts[i], p.ys[i] = x, t, y
            p.n = i + 1
            if p.n < FACTOR:
                return
            p.n = 0
            x, t, y = _median(p.xs), _median(p.ts), _median(p.ys)

    def scales(self, min_points: int) -> Iterator[tuple[list[float], list[float], list[float]]]:
        """``(xs, times, ys)`` of each scale worth judging, shortest first: the raw points,
        then every tier with at least ``min_points`` bins that spans more than the scale
        before it."""
        for _, points in self.tagged_scales(min_points):
            yield points()

    def tagged_scales(self, min_points: int) -> Iterator[tuple[tuple[int, int], Callable[
            [], tuple[list[float], list[float], list[float]]]]]:
        """:meth:`scales` as ``((tier, bins pushed), points)``: the tag is the same only for
        the same points (the raw points: tier -1, and the count of points fed)."""
        yield (-1, self.count), self.raw.points
        covered = self.raw.n
        if self.count <= covered:
            return
        for k, tier in enumerate(self.tiers):
            top = k == TIERS - 1
            span = self.count if top else tier.n * FIRST * FACTOR ** k
            if tier.n < min_points or span <= covered:
                continue
            covered = span
            yield (k, self.pushes[k]), tier.points


class Tiers:
    """The tiered series of the whole-process metrics a verdict judges, fed with samples
    as they come (a live alarm) or all at once (a report on a file): both give the same
    tiers from the same samples."""

    __slots__ = ("_carry", "series")

    def __init__(self) -> None:
        self.series: dict[str, TieredSeries] = {}
        self._carry = [0.0] * 6  # see sample_series(carry=...)

    @property
    def count(self) -> int:
        """Samples fed."""
        return int(self._carry[0])

    def skip(self, samples: int) -> None:
        """Count ``samples`` that were not fed (their indexes are not reused)."""
        self._carry[0] += samples

    def feed(self, samples: Iterable[Sample], prefix: str, keep: Callable[[str], bool],
             store: Callable[[str], bool] = lambda key: True) -> None:
        """Add ``samples`` (the ones after those fed before): each key ``keep`` accepts is
        read, each that ``store`` accepts too is kept; the resident sizes less memprobe's
        own memory, as :func:`sample_series` reads them."""
        columns, _, _ = sample_series(samples, prefix, keep, self._carry)
        self.add({k: c for k, c in columns.items() if store(k)})

    def add(self, columns: Mapping[str, tuple[Sequence[float], Sequence[float],
                                              Sequence[float]]]) -> None:
        """Add ``{key: (xs, ys, times)}`` as :func:`sample_series` returns them."""
        for key, (xs, ys, ts) in columns.items():
            tiered = self.series.get(key)
            if tiered is None:
                tiered = self.series[key] = TieredSeries()
            tiered.extend(xs, ts, ys)
