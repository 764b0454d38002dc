"""Phase markers: labelled points (``prober.mark("eval")``) and spans
(``with prober.phase("eval"):``) on a Prober's samples.

A mark or a span edge takes a sample at once (every probe, due or not), so the
values at a boundary are the values at that moment, and labels it. Every
sample taken inside a span carries the span's label. In the JSONL each label
is a field of the line (:data:`LABEL_FIELDS`):

- ``"mark": "checkpoint"`` on the sample a mark took;
- ``"phase": "eval"`` on every sample inside the span (nested spans join their
  labels with ``/``: ``"train/eval"``);
- ``"phase_edge": "start"`` or ``"end"`` on the samples a span's edges took.

``memprobe report`` reads them back into growth per phase (:func:`phase_growth`)
and draws marks as vertical lines and spans as shaded bands.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError, show
from ._sample import Number, Sample

if TYPE_CHECKING:
    from ._alarm import LeakAlarm
    from ._history import History
    from ._sinks import Sink
    from ._verdicts import Report

#: The fields of a JSONL line that label its sample (not tags: they do not split runs).
LABEL_FIELDS = ("mark", "phase", "phase_edge")
#: The longest label.
MAX_LABEL_CHARS = 200
#: Marks a Prober keeps in ``prober.marks`` (a ring: a long job marks without growing).
MAX_MARKS = 1000


@dataclass(frozen=True)
class Mark:
    """A labelled point: a mark, or one edge of a span.

    :ivar label: the mark's label, or the span's (``"train/eval"`` when nested).
    :ivar kind: ``"mark"``, ``"start"`` or ``"end"``.
    :ivar time_seconds: unix time of the sample it took.
    :ivar step: the step of that sample.
    """

    label: str
    kind: str
    time_seconds: float
    step: int | None


def check_label(label: Any) -> str:
    """A mark's or span's label: a non-empty str of at most :data:`MAX_LABEL_CHARS`
    characters, without ``/`` (which joins nested spans)."""
    if not isinstance(label, str) or not label.strip():
        raise ConfigError("label", f"must be a non-empty str, got {show(label)}")
    if "/" in label:
        raise ConfigError("label", f"must not contain '/' (it joins nested phases), "
                          f"got {show(label)}")
    if len(label) > MAX_LABEL_CHARS:
        raise ConfigError("label", f"must be at most {MAX_LABEL_CHARS} characters, "
                          f"got {len(label)}")
    return label


class PhaseMixin:
    """The Prober's marks and spans, its leak checks and capture, and ``report()``:
    what runs between samples, kept apart from the sampling itself."""

    prefix: str
    history: History
    alarm: LeakAlarm | None
    _sinks: list[tuple[str, Sink]]
    _labels: dict[str, str] | None
    _phases: list[str]
    _lock: threading.RLock
    marks: deque[Mark]

    def sample(self, step: int | None = None, *, force: bool = False) -> dict[str, Number]:
        raise NotImplementedError

    def _hook_failed(self, name: str, hook: str, exc: BaseException) -> None:
        raise NotImplementedError

    def _init_phases(self) -> None:
        self._labels = None  # the label fields of the samples taken now
        self._check_retained = 0  # resident bytes the leak checks kept (_check_leaks)
        self._check_retained_due = False
        self._check_values: dict[str, Number] = {}  # what the next sample carries of a check
        self._phases = []  # the open spans, outermost first
        #: The latest marks and span edges (at most :data:`MAX_MARKS`), oldest first.
        self.marks = deque(maxlen=MAX_MARKS)

    @property
    def current_phase(self) -> str | None:
        """The label of the innermost open span (``"train/eval"`` when nested), or None."""
        return "/".join(self._phases) or None

    def mark(self, label: str, *, step: int | None = None) -> Mark:
        """Record a labelled point: take a sample now (every probe, so the values are
        those of this moment), labelled ``label``; it costs one full sample.

        :param step: the sample's step; default: the step of the latest sample.
        :returns: the :class:`Mark`, also appended to ``prober.marks``.
        """
        return self._labelled(check_label(label), "mark", step)

    @contextlib.contextmanager
    def phase(self, label: str, *, step: int | None = None) -> Iterator[Mark]:
        """A labelled span: a sample at entry and at exit (every probe), and every
        sample taken inside labelled with it.

        >>> from memprobe import Prober
        >>> with Prober(probes=["gc"]) as prober, prober.phase("eval"):
        ...     values = prober.sample(step=1)
        >>> [(m.label, m.kind) for m in prober.marks]
        [('eval', 'start'), ('eval', 'end')]

        :param step: the step of the entry and exit samples; default: the latest.
        """
        start = self.start_phase(label, step=step)
        try:
            yield start
        finally:
            self.end_phase(label, step=step)

    def start_phase(self, label: str, *, step: int | None = None) -> Mark:
        """Open a span (for callbacks where a ``with`` block cannot span the phase,
        such as RLlib's ``on_evaluate_start``); :meth:`end_phase` closes it."""
        check_label(label)
        with self._lock:
            self._phases.append(label)
            try:
                return self._labelled(self.current_phase or label, "start", step)
            except BaseException:
                self._phases.pop()
                self._set_labels()
                raise

    def end_phase(self, label: str | None = None, *, step: int | None = None) -> Mark:
        """Close the innermost open span (``label``, when given, must be its label).

        :raises ConfigError: no span is open, or the innermost one has another label.
        """
        with self._lock:
            if not self._phases:
                raise ConfigError("label", f"end_phase({label!r}): no phase is open")
            if label is not None and self._phases[-1] != label:
                raise ConfigError("label", f"end_phase({label!r}): the innermost open phase "
                                  f"is {self._phases[-1]!r}")
            try:
                return self._labelled(self.current_phase or "", "end", step)
            finally:
                self._phases.pop()
                self._set_labels()

    def _set_labels(self, extra: Mapping[str, str] | None = None) -> None:
        phase = self.current_phase
        labels = {} if phase is None else {"phase": phase}
        if extra:
            labels.update(extra)
        self._labels = labels or None

    def _labelled(self, label: str, kind: str, step: int | None) -> Mark:
        with self._lock:  # another thread's sample must not take this sample's labels
            if step is None and len(self.history):
                step = self.history[-1].step
            self._set_labels({"mark": label} if kind == "mark" else {"phase_edge": kind})
            t = time.time()
            try:
                self.sample(step, force=True)
            finally:
                self._set_labels()
            mark = Mark(label, kind, t, step)
            self.marks.append(mark)
            return mark

    def _check_leaks(self, alarm: LeakAlarm) -> None:
        """The leak alarm's check: never raises into the caller's loop.

        Sites and types are judged only when a metric leaks. The memory in use
        (:func:`memprobe._alarm.check_memory_bytes`) is read before and after the
        judging: what it keeps is memprobe's. The total goes into the next sample
        as ``overhead/check_retained_bytes``, which verdicts subtract from the
        resident size like memprobe's other own memory, with the check's forecast
        (``leak/hours_to_oom``).

        What the alarm does once a metric alarms (its ``on_leak``, the capture it
        opens) is not in that span: a capture's walk of the heap is a one-off high
        point that the process's next allocations reuse. Counted as kept for good,
        it would hide that much of the leak that opened it.
        """
        from ._alarm import check_memory_bytes as resident_bytes

        before = resident_bytes()
        judged = False
        try:
            options = alarm.options
            report = self.report(**{**options, "sites": False})
            if report.leaking and options.get("sites", True):
                # Per-site and per-type verdicts, to name the culprits, only when a
                # metric leaks: a healthy job's checks read a few series, not dozens.
                report = self.report(**options)
            self._count_check_retained(before, resident_bytes())
            judged = True
            alarm.check(report)
            self._check_values = alarm.check_values(self.prefix)
        except Warning:
            raise  # warnings turned into errors by the user's filters are theirs
        except Exception as exc:
            self._hook_failed("leak_alarm", "on_leak", exc)
        finally:
            if not judged:
                self._count_check_retained(before, resident_bytes())

    def _count_check_retained(self, before: int, after: int) -> None:
        """Add what one check's judging kept of the resident size (0 when unknown)."""
        if before and after:
            self._check_retained = max(0, self._check_retained + after - before)
            self._check_retained_due = True

    def report(self, **options: Any) -> Report:
        """Leak verdicts on this Prober's ``history``, judged with its ``prefix``.

        Options go to :func:`memprobe.analyze_samples` (``thresholds``,
        ``warmup``, ``min_points``...).
        """
        from ._verdicts import analyze_samples, judged_keys

        options.setdefault("prefix", self.prefix)
        keep = judged_keys(options["prefix"], options.get("metrics"), options.get("sites", True))
        with self._lock:  # the history is read as it is judged, one sample at a time
            alarm = self.alarm
            if alarm is None or options["prefix"] != self.prefix:
                return analyze_samples(self.history.select(keep), **options)
            # The alarm's tiers: the whole run at every scale, as the alarm judges it.
            options.setdefault("tiers", alarm.absorb(self.history, self.prefix))
            return alarm.forecast(analyze_samples(self.history.select(keep), **options))

    def _finish_capture(self, alarm: LeakAlarm, now: float, step: int | None,
                        pid: int) -> None:
        """Close the alarm's capture and write its culprits to the sinks as one more
        line, its referrer chains as the line's ``holders`` field; never raises into
        the caller's loop."""
        from ._alarm_capture import HOLDERS
        from ._history import make_sample

        try:
            values = alarm.finish_capture(self.prefix)
        except Warning:
            raise  # warnings turned into errors by the user's filters are theirs
        except Exception as exc:
            alarm.abandon_capture()
            self._hook_failed("leak_capture", "finish", exc)
            return
        sample = make_sample(now, step, pid, values)
        culprits = alarm.culprits
        if culprits is not None and culprits.holders:
            sample.__dict__["labels"] = {HOLDERS: "\n".join(map(str, culprits.holders))}
        for name, s in self._sinks:
            try:
                s.write(sample)
            except Exception as exc:  # a user's sink
                self._hook_failed(name, "write", exc)


# -- reading back ------------------------------------------------------------------------
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
    if not phase or "/" not in phase:
        return None
    return phase.rsplit("/", 1)[0]


def _common(a: str | None, b: str | None) -> str | None:
    """The innermost span both phases are in."""
    if a is None or b is None:
        return None
    pa, pb = a.split("/"), b.split("/")
    n = 0
    while n < min(len(pa), len(pb)) and pa[n] == pb[n]:
        n += 1
    return "/".join(pa[:n]) or None


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
