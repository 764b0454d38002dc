"""The tiers of a Prober without a leak alarm: its judged metrics at every time scale
of the whole run, so that ``prober.report()`` judges what the alarm would."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from operator import itemgetter
from operator import sub as _sub

from .._sample import Number
from .._sitestats import collector_paused
from ..keys import key_of, make_key
from ..leak import _kinds
from ..leak._alarm import check_memory_bytes
from ..leak._garbage import FullCollections
from ..leak._series import MEMRAY_ACTIVE, MEMRAY_OWN
from ..leak._tiers import Tiers

__all__ = ["FED", "TierFeed"]

#: What a Prober without a leak alarm keeps at every time scale: every metric the
#: built-in probes declare judged (:data:`memprobe.DEFAULT_METRICS`, those its samples
#: have), the ones ``prober.report()`` judges. Each is taken from the sample as it is
#: made (a dict look-up and three appends), not read back from the history: feeding
#: them from the history cost a default sample ~7.7 µs more (+60%); taken as below,
#: docs/performance.md has the cost.
FED = _kinds.DEFAULT_METRICS
_RESIDENT = frozenset(f"process/{m}" for m in _kinds.RESIDENT)


def _row_getter(keys: list[str]) -> Callable[[dict[str, Number]], tuple[Number, ...]]:
    """A function giving the tuple of ``keys``' values in a sample (even of one key or
    none), raising KeyError when one is missing."""
    if len(keys) > 1:
        return itemgetter(*keys)
    if keys:
        key = keys[0]
        return lambda values: (values[key],)
    return lambda values: ()


class TierFeed:
    """The tiers of a Prober without a leak alarm, so that ``prober.report()`` judges
    every time scale of the whole run for each judged metric (:data:`FED`), as the
    alarm does, in the same bounded memory
    (:data:`memprobe.leak._tiers.BYTES_PER_SERIES` per metric).

    Each sample's judged metrics (the resident sizes less memprobe's own memory, as
    :func:`memprobe.leak._series.sample_series` reads it from the same sample, and
    not those read while a memray window was open) are taken
    as the sample is made and fed in batches of :attr:`every` samples. What feeding
    keeps (the tiers' arrays, allocated at the first batch) is counted as memprobe's
    own memory (``overhead/check_retained_bytes`` in the next sample), as a leak
    check's is.
    """

    every = 50
    #: A Prober with a TierFeed has no leak alarm.
    alarm = None
    tiers: Tiers
    full: FullCollections
    retained: int
    retained_due: bool
    _traced_own: float
    _checks_own: float
    _memray_own: float
    _tracking: bool
    _seen: int
    _xs: array[float]
    _ts: array[float]
    _own: array[float]
    _inside: bytearray
    _values: array[float]
    _pending: int
    _present: tuple[tuple[str, bool], ...]
    _absent: frozenset[str]
    _get: Callable[[dict[str, Number]], tuple[Number, ...]]
    _width: int

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        # (key, whether memprobe's own memory is subtracted: the resident sizes)
        self._keys = tuple((key_of(prefix, m), m in _RESIDENT) for m in FED)
        self._overhead = make_key(prefix, "tracemalloc", "overhead_bytes")
        self._traced = key_of(prefix, _kinds.TRACED)
        self._filtered = key_of(prefix, _kinds.FILTERED)
        self._key_retained = make_key(prefix, "overhead", "check_retained_bytes")
        self._memray_own_key = key_of(prefix, MEMRAY_OWN)
        self._active_key = key_of(prefix, MEMRAY_ACTIVE)
        self.reset()

    def after_sample(self, values: dict[str, Number], now: float, step: int | None,
                     pid: int) -> None:
        """Take one sample's judged metrics; feed a batch when one is due (no line for
        the sinks, unlike :meth:`AlarmChecks.after_sample`).

        The judged keys a sample has are read with one ``itemgetter`` call and kept as
        a row; the rows become columns when the batch is fed. The keys are looked for
        again when the sample's key count changes, or a judged key it lacked appears in
        as many keys (the rows so far are fed first)."""
        if self._overhead in values:
            traced_own = float(values[self._overhead])
            if self._traced in values and self._filtered in values:
                traced_own += max(0.0, float(values[self._traced]) - float(values[self._filtered]))
            self._traced_own = traced_own
        if self._key_retained in values:
            self._checks_own = float(values[self._key_retained])
        inside = self._tracking  # a memray window was open when this sample began
        if self._active_key in values:
            self._tracking = values[self._active_key] == 1
        if self._memray_own_key in values:
            self._memray_own = float(values[self._memray_own_key])
        x = float(step if step is not None else self._seen)
        self._seen += 1
        self.full.add(x, values)
        if len(values) != self._width or not values.keys().isdisjoint(self._absent):
            self._layout(values)
        try:
            row = self._get(values)
        except KeyError:  # as many keys, others: a new layout
            self._layout(values)
            row = self._get(values)
        # Into columns allocated once, not objects kept per sample: what a batch waits in
        # must not grow with the samples (a leak check's calls are fewer than a batch).
        i = self._pending
        self._xs[i] = x
        self._ts[i] = now
        self._own[i] = self._traced_own + self._checks_own + self._memray_own
        self._inside[i] = inside
        width = len(row)
        self._values[i * width:(i + 1) * width] = array("d", row)
        self._pending = i + 1
        if self._pending >= self.every:
            self.absorb()

    def _layout(self, values: dict[str, Number]) -> None:
        """Feed the rows taken so far; then take the judged keys that ``values`` has."""
        present = tuple((k, resident) for k, resident in self._keys if k in values)
        self._absent = frozenset(k for k, _ in self._keys if k not in values)
        if present != self._present:
            self.absorb()
            self._present = present
            keys = [k for k, _ in present]
            self._get = _row_getter(keys)
            self._values = array("d", [0.0]) * (self.every * len(keys))
        self._width = len(values)

    def absorb(self) -> Tiers:
        """Feed the samples since the last batch; returns the tiers."""
        if self._pending:
            n, self._pending = self._pending, 0
            self.tiers.skip(n)
            xs, ts, width, values = self._xs[:n], self._ts[:n], len(self._present), self._values
            batch = {}
            inside = self._inside[:n]
            judged = [i for i in range(n) if not inside[i]] if any(inside) else None
            own = self._own[:n]
            if judged is not None:  # the resident sizes read outside a memray window
                rxs, rts = array("d", [xs[i] for i in judged]), array("d", [ts[i] for i in judged])
            for j, (key, resident) in enumerate(self._present):
                column = values[j:n * width:width]
                if not resident:
                    batch[key] = (xs, column, ts)
                elif judged is None:
                    batch[key] = (xs, array("d", map(_sub, column, own)), ts)
                else:
                    batch[key] = (rxs, array("d", [column[i] - own[i] for i in judged]), rts)
            # A batch keeps memory only when it makes a series (its arrays): measured
            # then; the others leave what they found.
            makes = any(k not in self.tiers.series for k in batch)
            with collector_paused():  # the program's garbage freed is not counted
                before = check_memory_bytes() if makes else 0
                self.tiers.add(batch)
                after = check_memory_bytes() if makes else 0
            if before and after and after != before:
                self.retained = max(0, self.retained + after - before)
                self.retained_due = True
        return self.tiers

    def add_retained(self, values: dict[str, Number]) -> None:
        """After a batch kept memory: ``overhead/check_retained_bytes`` into ``values``."""
        if self.retained_due:
            self.retained_due = False
            values[self._key_retained] = self.retained

    def reset(self) -> None:
        """Forget every sample (a forked child judges its own samples only)."""
        self.tiers = Tiers()
        self._traced_own = 0.0  # memprobe's own memory, as sample_series reads it
        self._checks_own = 0.0
        self._memray_own = 0.0
        self._tracking = False
        self._seen = 0  # samples taken: the x of a sample without a step
        # Over the whole run (prober.report() weighs them): the history drops the
        # samples that recorded them.
        self.full = FullCollections(self.prefix)
        nan = array("d", [float("nan")])
        self._xs, self._ts, self._own = nan * self.every, nan * self.every, nan * self.every
        self._inside = bytearray(self.every)  # 1: read while a memray window was open
        self._values = array("d")  # the judged keys' values, a row of them per sample
        self._pending = 0  # samples taken since the last batch
        self._present = ()  # the judged keys of the rows
        self._absent = frozenset()  # the judged keys they lack
        self._get = lambda v: ()
        self._width = -1  # the key count of the sample the keys were looked for in
        self.retained = 0
        self.retained_due = False
