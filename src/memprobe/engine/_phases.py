"""Phase markers: labelled points (``prober.mark("eval")``) and spans
(``with prober.phase("eval"):``) on a Prober's samples.

A mark or a span edge takes a sample at once (every probe, due or not), so the
values at a boundary are the values at that moment, and labels it. Every
sample taken inside a span carries the span's label. In the JSONL each label
is a field of the line (:data:`memprobe._jsonl_fields.LABEL_FIELDS`):

- ``"mark": "checkpoint"`` on the sample a mark took;
- ``"phase": "eval"`` on every sample inside the span (nested spans join their
  labels with ``/``: ``"train/eval"``);
- ``"phase_edge": "start"`` or ``"end"`` on the samples a span's edges took.

``memprobe report`` reads them back into growth per phase
(:func:`memprobe.phase_growth`) and draws marks as vertical lines and spans as
shaded bands.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError, show
from .._jsonl_fields import PHASE_SEP

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
    if PHASE_SEP in label:
        raise ConfigError("label", f"must not contain '/' (it joins nested phases), "
                          f"got {show(label)}")
    if len(label) > MAX_LABEL_CHARS:
        raise ConfigError("label", f"must be at most {MAX_LABEL_CHARS} characters, "
                          f"got {len(label)}")
    return label


class Phases:
    """A Prober's open spans, its latest marks and the labels of the samples it takes now
    (the Prober's ``mark``, ``phase``, ``start_phase`` and ``end_phase`` change them).

    :ivar open: the labels of the open spans, outermost first.
    :ivar labels: the label fields of the samples taken now, or None.
    :ivar marks: the latest marks and span edges (at most :data:`MAX_MARKS`), oldest first.
    """

    def __init__(self) -> None:
        self.open: list[str] = []
        self.labels: dict[str, str] | None = None
        self.marks: deque[Mark] = deque(maxlen=MAX_MARKS)

    @property
    def current(self) -> str | None:
        """The label of the innermost open span (``"train/eval"`` when nested), or None."""
        return PHASE_SEP.join(self.open) or None

    def push(self, label: str) -> None:
        """Open a span inside the open ones."""
        self.open.append(label)

    def check_innermost(self, label: str | None) -> None:
        """Raise unless a span is open and (``label`` given) the innermost is ``label``."""
        if not self.open:
            raise ConfigError("label", f"end_phase({label!r}): no phase is open")
        if label is not None and self.open[-1] != label:
            raise ConfigError("label", f"end_phase({label!r}): the innermost open phase "
                              f"is {self.open[-1]!r}")

    def pop(self) -> None:
        """Close the innermost span; the labels are those of the spans still open."""
        self.open.pop()
        self.set_labels()

    def set_labels(self, extra: Mapping[str, str] | None = None) -> None:
        """The labels of the samples taken from now on: the current span's and ``extra``."""
        phase = self.current
        labels = {} if phase is None else {"phase": phase}
        if extra:
            labels.update(extra)
        self.labels = labels or None
