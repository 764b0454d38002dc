"""The tiers of a Prober without a leak alarm: its resident sizes at every time scale
of the whole run, so that ``prober.report()`` judges what the alarm would."""

from __future__ import annotations

from array import array

from .._sample import Number
from ..keys import key_of, make_key
from ..leak import _kinds
from ..leak._alarm import check_memory_bytes
from ..leak._tiers import Tiers

__all__ = ["FED", "TierFeed"]

#: What a Prober without a leak alarm keeps at every time scale: the resident sizes
#: (what runs out of memory). Its other metrics are judged on its history: feeding all
#: of them (6 with the default probes) from the history cost a default sample ~7.7 µs
#: more (+60%); the resident size as below, ~1-2 µs (docs/performance.md).
FED = tuple(f"process/{m}" for m in _kinds.RESIDENT)


class TierFeed:
    """The tiers of a Prober without a leak alarm, so that ``prober.report()`` judges
    every time scale of the whole run for the resident sizes (:data:`FED`), as the
    alarm does, in the same bounded memory
    (:data:`memprobe.leak._tiers.BYTES_PER_SERIES` per metric).

    Each sample's resident sizes, less memprobe's own memory as
    :func:`memprobe.leak._series.sample_series` reads it from the same sample, are taken
    as the sample is made and fed in batches of :attr:`every` samples. What feeding
    keeps (the tiers' arrays, allocated at the first batch) is counted as memprobe's
    own memory (``overhead/check_retained_bytes`` in the next sample), as a leak
    check's is.
    """

    every = 50
    #: A Prober with a TierFeed has no leak alarm.
    alarm = None

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._keys = tuple(key_of(prefix, m) for m in FED)
        self._overhead = make_key(prefix, "tracemalloc", "overhead_bytes")
        self._traced = key_of(prefix, _kinds.TRACED)
        self._filtered = key_of(prefix, _kinds.FILTERED)
        self._key_retained = make_key(prefix, "overhead", "check_retained_bytes")
        self._batch: dict[str, tuple[array[float], array[float], array[float]]] = {}
        self.reset()

    def after_sample(self, values: dict[str, Number], now: float, step: int | None,
                     pid: int) -> None:
        """Take one sample's resident sizes; feed a batch when one is due (no line for
        the sinks, unlike :meth:`AlarmChecks.after_sample`)."""
        if self._overhead in values:
            traced_own = float(values[self._overhead])
            if self._traced in values and self._filtered in values:
                traced_own += max(0.0, float(values[self._traced]) - float(values[self._filtered]))
            self._traced_own = traced_own
        if self._key_retained in values:
            self._checks_own = float(values[self._key_retained])
        x = float(step if step is not None else self._seen)
        self._seen += 1
        own = self._traced_own + self._checks_own
        for key in self._keys:
            v = values.get(key)
            if v is not None:
                col = self._batch.get(key)
                if col is None:
                    col = self._batch[key] = (array("d"), array("d"), array("d"))
                col[0].append(x)
                col[1].append(float(v) - own)
                col[2].append(now)
        self._pending += 1
        if self._pending >= self.every:
            self.absorb()

    def absorb(self) -> Tiers:
        """Feed the samples since the last batch; returns the tiers."""
        if self._pending:
            batch, self._batch = self._batch, {}
            self.tiers.skip(self._pending)
            self._pending = 0
            # A batch keeps memory only when it makes a series (its arrays): measured
            # then; the others leave what they found.
            makes = any(k not in self.tiers.series for k in batch)
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
        self._seen = 0  # samples taken: the x of a sample without a step
        self._batch = {}
        self._pending = 0  # samples taken since the last batch
        self.retained = 0
        self.retained_due = False
