"""What tracing windows saw: the evidence for a leak's kind when traced bytes are no series.

A windowed ``tracemalloc`` probe (``window_steps=W, period_steps=P``, the RLlib
adapter's ``diagnose=True``) traces W samples of every P: its ``traced_bytes``
is what one window traced, not the process's Python memory, so a flat
``traced_bytes`` says nothing of a Python leak. What the windows do say: at
each window's end, the bytes allocated inside it that are still alive
(``survivors_bytes``), by site (``survivors/<site>/size_bytes``). A Python
leak of L bytes per step leaves about L x W surviving bytes in every window,
at the user's line; a native leak leaves none. The windowed ``memray`` probe
does the same for native allocations (``memray/survivors_bytes``,
``memray/top/<site>/size_bytes``).

:func:`window_evidence` reads these from the series :func:`memprobe.analyze_samples`
gathers; :func:`memprobe.leak._kinds.classify` judges the kind from it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._format import fmt_value
from ..keys import (
    is_library_site,
    join_prefix,
    make_key,
    split_short,
    split_site,
    split_site_key,
)

__all__ = ["EXPLAINED_SHARE", "WINDOW_KEYS", "WindowEvidence", "capture_evidence",
           "is_window_count", "is_window_site", "window_evidence"]

#: Closed windows read (the latest): a site counts when it survives half of them.
_WINDOWS = 5

#: The least share of the bytes surviving a window per step a site must hold to be named.
_MIN_SITE_SHARE = 0.01
#: The share of a growth per step that what survives must hold to explain it.
EXPLAINED_SHARE = 0.25

#: The probes' windowed metrics (without prefix) the evidence is read from.
WINDOW_KEYS = (
    "tracemalloc/window_active", "tracemalloc/survivors_bytes", "tracemalloc/survivors_count",
    "memray/window_active", "memray/survivors_bytes",
)
#: The per-site sections of the windowed probes.
SITE_SECTIONS = {"tracemalloc": "survivors", "memray": "top"}



def is_window_site(short: str) -> bool:
    """Whether a key without prefix is a windowed probe's per-site size
    (``tracemalloc/survivors/<site>/size_bytes``, ``memray/top/<site>/size_bytes``)."""
    probe, metric = split_short(short)
    section = SITE_SECTIONS.get(probe)
    parts = split_site(metric, (section,)) if section is not None else None
    return parts is not None and parts.stat == "size_bytes"


def is_window_count(short: str) -> bool:
    """Whether a key without prefix is the tracemalloc windows' per-site count of
    surviving blocks (``tracemalloc/survivors/<site>/count``)."""
    probe, metric = split_short(short)
    parts = split_site(metric, ("survivors",)) if probe == "tracemalloc" else None
    return parts is not None and parts.stat == "count"


Series = Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]]


@dataclass(frozen=True)
class WindowEvidence:
    """What one windowed probe's latest windows saw.

    :ivar probe: ``"tracemalloc"`` (Python allocations) or ``"memray"`` (native).
    :ivar windows: closed windows read.
    :ivar steps_per_window: steps each window traced (W).
    :ivar survivors_per_step: median bytes surviving a window, per step traced.
    :ivar sites: ``(site, bytes per step)`` of the sites surviving at least half of
        the windows, the user's own first, largest first.
    """

    probe: str
    windows: int
    steps_per_window: float
    survivors_per_step: float
    sites: tuple[tuple[str, float], ...] = ()
    #: ``"window"`` (the probe's own windows) or ``"capture"`` (the alarm's capture).
    source: str = "window"
    #: Median blocks surviving a window, per step traced (0 when not counted).
    count_per_step: float = 0.0
    #: Of those, the blocks at the user's own sites (0 when not counted by site).
    user_count_per_step: float = 0.0

    @property
    def user_per_step(self) -> float:
        """Bytes per step surviving at the user's own sites."""
        return sum(b for s, b in self.sites if not is_library_site(s))

    def users_explain(self, rate_per_step: float, share: float = EXPLAINED_SHARE) -> bool:
        """Whether the bytes kept at the user's sites are ``share`` of a growth of
        ``rate_per_step`` or more."""
        return self.user_per_step >= share * max(rate_per_step, 1.0)

    def explains(self, rate_per_step: float, share: float = EXPLAINED_SHARE,
                 blocks_per_step: float | None = None) -> bool:
        """Whether what survives accounts for a growth of ``rate_per_step``.

        At the user's sites: at least ``share`` of it. At a library's sites alone, the
        survivors may be the library's blocks in flight (episodes not yet returned):
        they survive every short window of a healthy process too, and are given back
        later. What a library keeps stays alive, so Python's live blocks
        (``blocks_per_step``: ``gc/allocated_blocks``' growth per step) grow by at
        least ``share`` of the blocks that survive each window; blocks in flight leave
        their count level. Then at least ``share`` of the growth explains it. Without
        a count of live blocks (None), or in the alarm's capture (its longer view holds
        what is in flight as a small share per step), all of it must survive."""
        rate = max(rate_per_step, 1.0)
        if self.probe != "tracemalloc":
            return self.survivors_per_step >= share * rate
        if self.users_explain(rate, share):
            return True
        if (self.source == "window" and blocks_per_step is not None
                and self.count_per_step > 0):
            kept = blocks_per_step >= share * self.count_per_step
            return kept and self.survivors_per_step >= share * rate
        return self.survivors_per_step >= rate

    def describe(self, rate_per_step: float) -> str:
        """What the kind rests on, in a few words."""
        user = self.user_per_step if self.probe == "tracemalloc" else self.survivors_per_step
        user_s = ("" if user == self.survivors_per_step else
                  f" ({fmt_value(user, 'bytes')} at the user's lines)")
        windows = f"{self.windows} {self.probe} window" + ("" if self.windows == 1 else "s")
        if self.source == "capture":
            windows = (f"the alarm's capture ({self.probe}, "
                       f"{self.steps_per_window:.0f} samples)")
        return (f"from {windows}: {fmt_value(self.survivors_per_step, 'bytes')}"
                f"/sample survive{user_s} against {fmt_value(rate_per_step, 'bytes')}/sample")


def _window_spans(active: tuple[Sequence[float], Sequence[float], Sequence[float]] | None,
                  ) -> dict[float, float]:
    """``{step of the sample that closed a window: steps the window traced}``, from the
    ``window_active`` series: from a window's first active sample to the sample that
    closed it (empty when the series is missing)."""
    if active is None:
        return {}
    spans: dict[float, float] = {}
    opened: float | None = None
    for x, y in zip(active[0], active[1]):
        if y and opened is None:
            opened = x
        elif not y and opened is not None:
            spans[x] = x - opened
            opened = None
    return spans


def _steps_per_window(spans: Mapping[float, float]) -> float:
    """W: the median steps a window traced (1 when unknown)."""
    return max(1.0, statistics.median(spans.values())) if spans else 1.0


def window_evidence(series: Series, prefix: str, probe: str = "tracemalloc",
                    ) -> WindowEvidence | None:
    """The evidence of ``probe``'s windows in ``series`` (``{key: (xs, ys, times)}``),
    or None when it did not run windowed."""
    total = series.get(make_key(prefix, probe, "survivors_bytes"))
    if total is None or not len(total[0]):
        return None
    # A window that closed at the step it opened traced no step's work, so it cannot say
    # what a step keeps: the RLlib driver's and Learners' first call samples twice in
    # one iteration, and with one window per 25 iterations, that empty window was half
    # the evidence (a Learner's kept numpy copies then read as a small share of its rss
    # growth: native).
    spans = _window_spans(series.get(make_key(prefix, probe, "window_active")))
    empty = {x for x, n in spans.items() if n <= 0}
    traced = [(x, y) for x, y in zip(total[0], total[1]) if x not in empty]
    if not traced:
        return None
    closes = [x for x, _ in traced][-_WINDOWS:]
    w = _steps_per_window({x: n for x, n in spans.items() if n > 0})
    at = {x: i for i, x in enumerate(closes)}
    sizes: dict[str, list[float]] = {}
    blocks: dict[str, list[float]] = {}
    for key, (xs, ys, _ts) in series.items():
        found = split_site_key(key, prefix)
        if found is None or found[0] != probe:
            continue
        section, name, stat = found[1]
        if section != SITE_SECTIONS[probe] or stat not in ("size_bytes", "count") \
                or name == "other":
            continue
        vals = [float(y) for x, y in zip(xs, ys) if x in at]
        if vals:
            (sizes if stat == "size_bytes" else blocks)[name] = vals
    need = (len(closes) + 1) // 2

    def per_step(v: list[float]) -> float:
        return statistics.median(v + [0.0] * (len(closes) - len(v))) / w

    ranked = [(s, per_step(v)) for s, v in sizes.items() if len(v) >= need]
    survive = statistics.median([y for _, y in traced][-_WINDOWS:]) / w
    counts = series.get(make_key(prefix, probe, "survivors_count"))
    counted = [y for x, y in zip(*counts[:2]) if x in at] if counts else []
    count = statistics.median(counted) / w if counted else 0.0
    # A site holding a sliver of what survives is what happened to be alive as the
    # window closed (the loop's counter at the ``for`` line), not a culprit.
    floor = max(0.0, _MIN_SITE_SHARE * survive)
    ranked = [r for r in ranked if r[1] > floor]
    ranked.sort(key=lambda r: (is_library_site(r[0]), -r[1]))
    user_count = sum(per_step(blocks[s]) for s, _ in ranked
                     if not is_library_site(s) and s in blocks)
    return WindowEvidence(probe, len(closes), w, survive, tuple(ranked), count_per_step=count,
                          user_count_per_step=user_count)


def capture_evidence(samples: Sequence[Any], prefix: str) -> WindowEvidence | None:
    """What the alarm's capture saw (its line's ``capture/tracemalloc/survivors/<site>/
    size_bytes``: blocks allocated during the capture and alive at its end), as one
    tracemalloc window over the samples taken during it; None without a capture, or
    when it traced nothing. The evidence for the kind where the cheap probes alone ran."""
    duration_key = make_key(prefix, "capture", "duration_seconds")
    cap = next((s for s in reversed(samples) if duration_key in s.values), None)
    if cap is None:
        return None
    end = float(cap.time_seconds)
    start = end - float(cap.values[duration_key])
    steps = sum(1 for s in samples
                if duration_key not in s.values and start <= float(s.time_seconds) <= end)
    steps = max(1, steps)
    capture_prefix = join_prefix(prefix, "capture")
    sizes: dict[str, float] = {}
    for key, value in cap.values.items():
        found = split_site_key(key, capture_prefix)
        if found is None or found[0] != "tracemalloc":
            continue
        section, name, stat = found[1]
        if section == "survivors" and stat == "size_bytes":
            sizes[name] = float(value)
    if not sizes:
        return None
    per_step = sum(sizes.values()) / steps
    floor = _MIN_SITE_SHARE * per_step
    ranked = [(site, b / steps) for site, b in sizes.items()
              if site != "other" and b / steps > floor]
    ranked.sort(key=lambda r: (is_library_site(r[0]), -r[1]))
    return WindowEvidence("tracemalloc", 1, float(steps), per_step, tuple(ranked), "capture")
