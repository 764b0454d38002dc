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
    if not any(_label(s, "phase") for s in samples):
        return []
    out: dict[str, PhaseGrowth] = {}
    prev: Sample | None = None
    for s in samples:
        phase = _label(s, "phase")
        edge = _label(s, "phase_edge")
        if phase and edge == "start":
            g = out.setdefault(phase, PhaseGrowth(phase, growth={}))
            g.spans += 1
        if prev is not None:
            pa = _label(prev, "phase")
            if _label(prev, "phase_edge") == "end":
                pa = _parent(pa)
            pb = _parent(phase) if edge == "start" else phase
            where = (pa if pa == pb else _common(pa, pb)) or ""
            g = out.setdefault(where, PhaseGrowth(where, growth={}))
            g.seconds += s.time_seconds - prev.time_seconds
            assert g.growth is not None
            for key in metrics:
                if key in s.values and key in prev.values:
                    g.growth[key] = g.growth.get(key, 0.0) + (
                        float(s.values[key]) - float(prev.values[key]))
        prev = s
    return sorted(out.values(), key=lambda g: (g.label == "", g.label))


def mark_times(samples: Sequence[Sample]) -> tuple[list[tuple[float, str]],
                                                   list[tuple[float, float, str]]]:
    """``(marks, spans)``: each mark as ``(time, label)``, each span as
    ``(start time, end time, label)`` (a span left open ends at the last sample)."""
    marks: list[tuple[float, str]] = []
    spans: list[tuple[float, float, str]] = []
    open_: dict[str, float] = {}
    for s in samples:
        mark = _label(s, "mark")
        if mark:
            marks.append((s.time_seconds, mark))
        phase = _label(s, "phase")
        edge = _label(s, "phase_edge")
        if phase and edge == "start":
            open_[phase] = s.time_seconds
        elif phase and edge == "end" and phase in open_:
            spans.append((open_.pop(phase), s.time_seconds, phase))
    if samples:
        spans += [(t, samples[-1].time_seconds, p) for p, t in open_.items()]
    return marks, spans
