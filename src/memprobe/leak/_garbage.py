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

- the latest full collection in the span judged, after enough growth since the one
  before it (the count's floor): it freed :data:`GARBAGE_SHARE` of that growth or more:
  garbage (``ok``); less: kept objects (the leak stands);
- else two full collections in the span, far enough apart: the blocks right after the
  later one, less those right after the earlier, are garbage-free growth; at least
  :data:`GARBAGE_SHARE` of the growth judged between them: the leak stands; less: garbage;
- else nothing tells: ``slight``, with a note saying so, never a leak.
"""

from __future__ import annotations

import dataclasses
import gc
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..keys import key_of

if TYPE_CHECKING:
    from .._sample import Number, Sample
    from ._verdict import Verdict

#: The gc probe's count of full collections and the blocks right after the latest.
FULL_COUNT = "gc/full/collections_count"
FULL_BLOCKS = "gc/full/blocks_after"
#: In files written before those keys: the oldest generation's collections.
OLDEST_COUNT = f"gc/gen{len(gc.get_stats()) - 1}/collections_count"
BLOCKS = "gc/allocated_blocks"
#: The keys the evidence is read from.
KEYS = (FULL_COUNT, FULL_BLOCKS, OLDEST_COUNT)
#: Share of a count of live objects' growth that one full collection must free for the
#: growth to be garbage awaiting collection, not a leak: the live alarm's rule
#: (:meth:`memprobe.leak._alarm.LeakAlarm._garbage`) and the report's. Cyclic garbage
#: waits for the oldest generation's collection, which a large heap runs rarely: a
#: healthy RLlib EnvRunner's blocks grew by 0.5% over 1,800 samples with none.
GARBAGE_SHARE = 0.5
#: Full collections remembered (the latest).
KEEP = 64
#: How the note of a growth of live blocks that is not a leak begins (a report shows it).
UNCONFIRMED, GARBAGE = "not confirmed: ", "cyclic garbage: "


@dataclasses.dataclass(frozen=True)
class FullCollection:
    """A full collection seen in the samples.

    :ivar step: the step of the first sample after it.
    :ivar since: the step of the full collection before it, or of the first sample
        that counted them.
    :ivar freed: blocks it freed (those of the sample before, less those right after).
    :ivar after: blocks right after it.
    """

    step: float
    since: float
    freed: float
    after: float


class FullCollections:
    """The latest :data:`KEEP` full collections in samples fed in time order."""

    def __init__(self, prefix: str) -> None:
        self._keys = [key_of(prefix, k) for k in (FULL_COUNT, FULL_BLOCKS, OLDEST_COUNT, BLOCKS)]
        self.events: deque[FullCollection] = deque(maxlen=KEEP)
        self._count: Number | None = None
        self._since = 0.0
        self._blocks: Number | None = None

    def add(self, step: float, values: Mapping[str, Number]) -> None:
        count_key, after_key, oldest_key, blocks_key = self._keys
        blocks = values.get(blocks_key)
        exact = count_key in values
        count = values.get(count_key if exact else oldest_key)
        if count is not None:
            if self._count is None:
                self._since = step
            elif count != self._count:
                after = values.get(after_key) if exact else blocks
                if after is not None and self._blocks is not None:
                    self.events.append(FullCollection(step, self._since,
                                                      float(self._blocks) - after, float(after)))
                self._since = step
            self._count = count
        if blocks is not None:
            self._blocks = blocks


def full_collections(samples: Iterable[Sample], prefix: str) -> Sequence[FullCollection]:
    """The full collections the gc probe recorded in ``samples`` (the latest :data:`KEEP`)."""
    found = FullCollections(prefix)
    for i, s in enumerate(samples):
        found.add(float(s.step if s.step is not None else i), s.values)
    return tuple(found.events)


def weighed(v: Verdict) -> bool:
    """Whether ``v`` is a growth of live blocks that :func:`weigh` judged no leak."""
    return v.note.startswith((UNCONFIRMED, GARBAGE))


def weigh(v: Verdict, events: Sequence[FullCollection], end: float, floor: float) -> Verdict:
    """The verdict ``v`` on ``gc/allocated_blocks`` (a leak over its last ``span_points``
    steps, up to step ``end``) weighed against the full ``events``: kept with a note
    saying what confirms it, or ``ok`` (garbage) or ``slight`` (nothing tells) with a
    note saying why. ``floor``: the least growth worth judging (the count's floor)."""
    if not v.leaking:
        return v
    start = end - max(v.span_points, 1) + 1
    rate = v.slope_per_step
    inside = [e for e in events if start <= e.step <= end]
    late = next((e for e in reversed(inside) if rate * (e.step - e.since) >= floor), None)
    if late is not None:
        steps = late.step - late.since
        grown = rate * steps
        said = (f"the full collection at step {late.step:,.0f} freed {late.freed:,.0f} "
                f"blocks of the {grown:,.0f} grown over the {steps:,.0f} steps before it")
        garbage = late.freed >= GARBAGE_SHARE * grown
    elif len(inside) >= 2 and rate * (inside[-1].step - inside[0].step) >= floor:
        first, last = inside[0], inside[-1]
        grown = rate * (last.step - first.step)
        said = (f"{last.after - first.after:+,.0f} blocks right after the full collections "
                f"at steps {first.step:,.0f} and {last.step:,.0f}, against {grown:,.0f} grown")
        garbage = last.after - first.after < GARBAGE_SHARE * grown
    else:
        return dataclasses.replace(
            v, status="slight", kind=None, culprits=(),
            note=(f"{UNCONFIRMED}no full collection in the {v.span_points:,} steps judged, "
                  "and cyclic garbage awaiting one grows the live blocks as a leak does "
                  "(the gc probe's collect=True tells them apart)"))
    if garbage:
        return dataclasses.replace(v, status="ok", kind=None, culprits=(),
                                   note=GARBAGE + said)
    return dataclasses.replace(v, note=f"{v.note}; objects kept: {said}" if v.note
                               else f"objects kept: {said}")
