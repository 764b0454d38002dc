"""Verdicts at every time scale: judge each scale of a tiered series, keep the one that
tells most, and say which scale it rests on ("over the last 3 h 10 min")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from ._tiers import FACTOR, FIRST, TIERS, TieredSeries

__all__ = ["SAMPLE_ORDER_NOTE", "duration_words", "floor_level", "judge_scales",
           "scale_words", "steps_usable"]

V = TypeVar("V")

#: The note on a verdict whose steps could not be its axis (:func:`steps_usable`).
SAMPLE_ORDER_NOTE = "the steps repeat or go back: judged in sample order"

#: Statuses, the one that tells most first: a leak at any scale is a leak.
_RANK = {"leak": 0, "slight": 1, "levelled": 2, "ok": 3, "insufficient": 4}


def steps_usable(xs: Sequence[float], min_points: int) -> bool:
    """Whether the steps ``xs`` can be a series' axis: they never go back, and take at
    least ``min_points`` distinct values (all of them, on fewer points).

    A loop that passes the same step each time (``sample(step=0)``), or one that cycles
    (``step=i % 2``), gives a series whose slope over its steps says nothing of its growth
    over time: such a series is judged in the order of its samples instead.
    """
    if any(b < a for a, b in zip(xs, xs[1:])):
        return False
    distinct = 1 + sum(1 for a, b in zip(xs, xs[1:]) if b != a) if len(xs) else 0
    return distinct >= min(min_points, len(xs))


def judge_scales(tiered: TieredSeries, min_points: int,
                 judge: Callable[[Sequence[float], Sequence[float], Sequence[float]], V],
                 context: Hashable = None) -> V:
    """The verdict of the scale that tells most: the most telling status (leak, then
    slight, levelled, ok, insufficient), at the longest scale that has it.

    :param judge: ``judge(xs, ys, times)`` gives a verdict with ``status``,
        ``span_points`` and ``span_seconds`` fields.
    :param context: everything besides the points that ``judge`` depends on (floors,
        options): a tier whose bins and context are those it was last judged with keeps
        its verdict. A coarse tier gets a bin every 64 samples or more, so a live check
        judges the few scales that changed (the same verdicts as judging them all).
    """
    best: Any = None
    best_rank: tuple[int, int] = (len(_RANK), 0)
    cache = tiered.verdicts
    for tag, points in tiered.tagged_scales(2 * min_points):
        hit = cache.get(tag[0])
        if hit is not None and hit[0] == (tag, context):
            v: Any = hit[1]
        else:
            xs, ts, ys = points()
            ordered = steps_usable(xs, min_points)
            if not ordered:
                # The samples a point of this scale stands for: 1 for the raw points, a
                # bin's width for a tier (the top tier's bins share the whole run).
                k = tag[0]
                width = (1.0 if k < 0 else tiered.count / len(xs) if k == TIERS - 1
                         else float(FIRST * FACTOR ** k))
                xs = [i * width for i in range(len(xs))]
            v = judge(xs, ys, ts)
            span = int(xs[-1] - xs[0]) + 1 if xs else 0
            v = dataclasses.replace(v, span_points=span,
                                    span_seconds=(ts[-1] - ts[0]) if ts else None)
            if not ordered:
                v = dataclasses.replace(v, step="sample", note=(
                    f"{v.note}; {SAMPLE_ORDER_NOTE}" if v.note else SAMPLE_ORDER_NOTE))
            cache[tag[0]] = ((tag, context), v)
        span = v.span_points
        rank = (_RANK.get(v.status, len(_RANK)), -span)
        if best is None or rank < best_rank:
            best, best_rank = v, rank
    return best  # type: ignore[no-any-return]


def floor_level(tiered: TieredSeries | None) -> float:
    """The resident size the floors are shares of: the median of the latest points, in
    steps of 4.4% (2**(1/16)), so that floors stay put and :func:`judge_scales` can reuse
    a tier's verdict; 0 without a series."""
    if tiered is None or not tiered.count:
        return 0.0
    level = _median(tiered.raw.points()[2])
    return 2.0 ** (round(math.log2(level) * 16) / 16) if level > 0 else 0.0


def _median(v: Sequence[float]) -> float:
    s = sorted(v)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2.0


def duration_words(seconds: float) -> str:
    """``3 h 10 min``, ``12 min``, ``41 s``, ``2 d 4 h``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    m, _ = divmod(s, 60)
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def scale_words(span_points: int, span_seconds: float | None, step: str,
                warmup_points: int | None = None) -> str:
    """The scale a verdict rests on: ``over the last 3 h 10 min (12,288 samples, warm-up
    40)``."""
    points = f"{span_points:,} {step}s"
    warmup = "" if warmup_points is None else f"warm-up {warmup_points}"
    # Under a minute, the count of steps says it better than a few seconds would (and
    # does not change with the machine's speed).
    if span_seconds and span_seconds >= 60:
        inside = f"{points}, {warmup}" if warmup else points
        return f"over the last {duration_words(span_seconds)} ({inside})"
    return f"over the last {points}" + (f" ({warmup})" if warmup else "")
