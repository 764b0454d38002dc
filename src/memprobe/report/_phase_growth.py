"""Growth per phase and the marks and spans of a run, read back from its samples'
labels (the fields a Prober's marks and spans give each JSONL line: memprobe.engine._phases)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._jsonl_fields import PHASE_SEP
from .._sample import Sample


@dataclass
class PhaseGrowth:
    """What a phase did over a run: its spans, time, and growth of each metric.

    A phase's growth is its own: the growth inside a nested span counts in the
    nested label (``train/eval``), not in ``train``. The label ``""`` is the
    time outside every span.
    """

    label: str
    spans: int = 0
    seconds: float = 0.0
    growth: dict[str, float] | None = None


def _label(sample: Sample, field: str) -> str | None:
    labels = sample.labels
    return None if labels is None else labels.get(field)


def _parent(phase: str | None) -> str | None:
    if not phase or PHASE_SEP not in phase:
        return None
    return phase.rsplit(PHASE_SEP, 1)[0]


def _common(a: str | None, b: str | None) -> str | None:
    """The innermost span both phases are in."""
    if a is None or b is None:
        return None
    pa, pb = a.split(PHASE_SEP), b.split(PHASE_SEP)
    n = 0
    while n < min(len(pa), len(pb)) and pa[n] == pb[n]:
        n += 1
    return PHASE_SEP.join(pa[:n]) or None


def phase_growth(samples: Sequence[Sample], metrics: Sequence[str]) -> list[PhaseGrowth]:
    """Growth of each of ``metrics`` (full keys) per phase, over samples in time order.

    Each change between two consecutive samples counts in the innermost span
    both are inside (an entry sample starts its span, an exit sample ends it),
    or outside every span (label ``""``). Empty when no sample has a phase.
    The samples are read back from a JSONL file (:func:`memprobe.read_samples`):
    ``prober.history`` keeps no labels.
    """
    tally = PhaseTally(metrics)
    for s in samples:
        tally.add(s)
    return tally.result()


class PhaseTally:
    """:func:`phase_growth` one sample at a time, in memory that grows with the phases
    only (a report reads a file's samples as they stream by)."""

    __slots__ = ("_metrics", "_out", "_phased", "_prev")

    def __init__(self, metrics: Sequence[str]) -> None:
        self._metrics = tuple(metrics)
        self._out: dict[str, PhaseGrowth] = {}
        self._prev: Sample | None = None
        self._phased = False  # some sample has a phase

    def add(self, s: Sample) -> None:
        """The next sample, in time order."""
        phase = _label(s, "phase")
        edge = _label(s, "phase_edge")
        out = self._out
        if phase:
            self._phased = True
        if phase and edge == "start":
            g = out.setdefault(phase, PhaseGrowth(phase, growth={}))
            g.spans += 1
        prev = self._prev
        if prev is not None:
            pa = _label(prev, "phase")
            if _label(prev, "phase_edge") == "end":
                pa = _parent(pa)
            pb = _parent(phase) if edge == "start" else phase
            where = (pa if pa == pb else _common(pa, pb)) or ""
            g = out.setdefault(where, PhaseGrowth(where, growth={}))
            g.seconds += s.time_seconds - prev.time_seconds
            assert g.growth is not None
            for key in self._metrics:
                if key in s.values and key in prev.values:
                    g.growth[key] = g.growth.get(key, 0.0) + (
                        float(s.values[key]) - float(prev.values[key]))
        self._prev = s

    def result(self, metrics: Sequence[str] | None = None) -> list[PhaseGrowth]:
        """The phases, outside every span last; empty when no sample had a phase.

        :param metrics: the growth of these keys only (default: all tallied).
        """
        if not self._phased:
            return []
        out = sorted(self._out.values(), key=lambda g: (g.label == "", g.label))
        if metrics is None:
            return out
        return [PhaseGrowth(g.label, g.spans, g.seconds,
                            {k: v for k, v in (g.growth or {}).items() if k in metrics})
                for g in out]


#: Marks, and spans, a report keeps of one run (the first ones).
MAX_MARKS = 1000


def mark_times(samples: Sequence[Sample]) -> tuple[list[tuple[float, str]],
                                                   list[tuple[float, float, str]]]:
    """``(marks, spans)``: each mark as ``(time, label)``, each span as
    ``(start time, end time, label)`` (a span left open ends at the last sample)."""
    tally = MarkTally()
    for s in samples:
        tally.add(s)
    return tally.result()


class MarkTally:
    """:func:`mark_times` one sample at a time: the first :data:`MAX_MARKS` marks and
    spans, and at most that many spans open at once."""

    __slots__ = ("_last", "_open", "marks", "spans")

    def __init__(self) -> None:
        self.marks: list[tuple[float, str]] = []
        self.spans: list[tuple[float, float, str]] = []
        self._open: dict[str, float] = {}
        self._last: float | None = None

    def add(self, s: Sample) -> None:
        """The next sample, in time order."""
        self._last = s.time_seconds
        if s.labels is None:
            return
        mark = _label(s, "mark")
        if mark and len(self.marks) < MAX_MARKS:
            self.marks.append((s.time_seconds, mark))
        phase = _label(s, "phase")
        edge = _label(s, "phase_edge")
        if phase and edge == "start":
            if phase in self._open or len(self._open) < MAX_MARKS:
                self._open[phase] = s.time_seconds
        elif phase and edge == "end" and phase in self._open:
            start = self._open.pop(phase)
            if len(self.spans) < MAX_MARKS:
                self.spans.append((start, s.time_seconds, phase))

    def result(self) -> tuple[list[tuple[float, str]], list[tuple[float, float, str]]]:
        """``(marks, spans)``, the spans left open ending at the last sample."""
        spans = list(self.spans)
        if self._last is not None:
            spans += [(t, self._last, p) for p, t in self._open.items()]
        return list(self.marks), spans
