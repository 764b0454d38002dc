"""Garbage or kept objects: what a verdict on Python's live blocks rests on, offline.

``gc/allocated_blocks`` counts cyclic garbage until the collector frees it, and the
garbage that waits for the oldest generation's collection waits long in a large heap
(CPython runs it once the objects moved there since reach a quarter of those it holds:
a healthy RLlib EnvRunner's blocks grew 1.3% over 900 samples with none). The live
alarm tells garbage from kept objects by one ``gc.collect()`` before it alarms
(:meth:`memprobe.leak._alarm.LeakAlarm._garbage`); a report on samples cannot collect.
It reads the full collections the gc probe recorded instead (``gc/full/*``: how many,
and the blocks right after the latest; in files written before these keys, the oldest
generation's ``collections_count`` and the blocks of the sample after it):

- the blocks right after the latest full collection in the span judged, less those at
  a point before it (right after the earliest full collection in the span, else the
  one before, else the first sample), were kept: the count's floor or more, a leak;
- else, when the blocks had grown by the floor or more before it, it freed the growth:
  cyclic garbage (``ok``);
- else nothing tells: ``slight``, with a note saying so, never a leak.

A growth of kept objects then stands whatever garbage grows beside it.
"""

from __future__ import annotations

import dataclasses
import gc
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..keys import key_of
from ._kinds import BLOCKS

if TYPE_CHECKING:
    from .._sample import Number, Sample


class _Judged(Protocol):  # what weigh() reads of a Verdict
    status: Any
    slope_per_step: float
    span_points: int
    note: str


V = TypeVar("V", bound=_Judged)

#: The gc probe's count of full collections and the blocks right after the latest.
FULL_COUNT = "gc/full/collections_count"
FULL_BLOCKS = "gc/full/blocks_after"
#: In files written before those keys: the oldest generation's collections.
OLDEST_COUNT = f"gc/gen{len(gc.get_stats()) - 1}/collections_count"
#: The keys the evidence is read from.
KEYS = (FULL_COUNT, FULL_BLOCKS, OLDEST_COUNT)
#: Full collections remembered (the latest).
KEEP = 64
#: How the note of a growth of live blocks that is not a leak begins (a report shows it).
UNCONFIRMED, GARBAGE = "not confirmed: ", "cyclic garbage: "


@dataclasses.dataclass(frozen=True)
class FullCollection:
    """A full collection seen in the samples.

    :ivar step: the step of the first sample after it.
    :ivar before: the blocks of the sample before it.
    :ivar after: the blocks right after it (garbage-free).
    :ivar since: the step of the full collection before it, else of the first sample
        that counted them.
    :ivar base: the blocks right after the one before it, else those of that first
        sample (garbage-free, or more than the live blocks then: a lower bound of what
        was kept since).
    """

    step: float
    before: float
    after: float
    since: float
    base: float


class FullCollections:
    """The latest :data:`KEEP` full collections in samples fed in time order."""

    def __init__(self, prefix: str) -> None:
        self._keys = [key_of(prefix, k) for k in (FULL_COUNT, FULL_BLOCKS, OLDEST_COUNT, BLOCKS)]
        self.events: deque[FullCollection] = deque(maxlen=KEEP)
        self._count: Number | None = None
        self._since = self._base = 0.0
        self._blocks: Number | None = None

    def add(self, step: float, values: Mapping[str, Number]) -> None:
        count_key, after_key, oldest_key, blocks_key = self._keys
        blocks = values.get(blocks_key)
        exact = count_key in values
        count = values.get(count_key if exact else oldest_key)
        if count is not None and blocks is not None:
            if self._count is None:
                self._since, self._base = step, float(blocks)
            elif count != self._count:
                after = float(values.get(after_key, blocks) if exact else blocks)
                if self._blocks is not None:
                    self.events.append(FullCollection(step, float(self._blocks), after,
                                                      self._since, self._base))
                self._since, self._base = step, after
            self._count = count
        if blocks is not None:
            self._blocks = blocks


def full_collections(samples: Iterable[Sample], prefix: str) -> Sequence[FullCollection]:
    """The full collections the gc probe recorded in ``samples`` (the latest :data:`KEEP`)."""
    found = FullCollections(prefix)
    for i, s in enumerate(samples):
        found.add(float(s.step if s.step is not None else i), s.values)
    return tuple(found.events)


def weighed(v: _Judged) -> bool:
    """Whether ``v`` is a growth of live blocks that :func:`weigh` judged no leak."""
    return v.note.startswith((UNCONFIRMED, GARBAGE))


def weigh(v: V, events: Sequence[FullCollection], end: float, floor: float) -> V:
    """The verdict ``v`` on ``gc/allocated_blocks`` (a leak over its last ``span_points``
    steps, up to step ``end``) weighed against the full collections ``events``: kept
    with a note saying what confirms it, or ``ok`` (garbage) or ``slight`` (nothing
    tells) with a note saying why. ``floor``: the least growth of a leak (the count's).

    The latest full collection in the span tells: the blocks right after it, less
    those at a point before it (the earliest full collection in the span, else the one
    before it, else the first sample), were kept; at least ``floor`` of them: a leak.
    Else, when the blocks before it had grown by ``floor`` or more, the collection freed
    the growth: garbage. Else nothing tells."""
    if v.status != "leak":
        return v
    start = end - max(v.span_points, 1) + 1
    inside = [e for e in events if start <= e.step <= end]
    if inside:
        last, first = inside[-1], inside[0]
        since, base = (first.step, first.after) if first is not last else (last.since, last.base)
        kept, grown = last.after - base, last.before - base
        said = (f"{kept:+,.0f} blocks from step {since:,.0f} to the full collection at step "
                f"{last.step:,.0f}, which freed {last.before - last.after:,.0f}")
        if kept >= floor:
            return dataclasses.replace(v, note=f"{v.note}; objects kept: {said}" if v.note
                                       else f"objects kept: {said}")
        if grown >= floor:
            return dataclasses.replace(v, status="ok", kind=None, culprits=(),
                                       note=GARBAGE + said)
    return dataclasses.replace(
        v, status="slight", kind=None, culprits=(),
        note=(f"{UNCONFIRMED}no full collection in the {v.span_points:,} steps judged "
              "tells it from cyclic garbage awaiting one, which grows the live blocks as a "
              "leak does (the gc probe's collect=True tells them apart)"))
