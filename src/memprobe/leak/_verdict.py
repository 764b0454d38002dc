"""A leak verdict and a report of verdicts: what :func:`memprobe.analyze` and
:func:`memprobe.analyze_samples` return, and how each reads in words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .._format import fmt_interval, fmt_value
from ..keys import format_culprit, short_key, site_name, split_short
from . import _kinds
from ._scales import duration_words, scale_words

__all__ = ["STATUS_WORDS", "Report", "Status", "Verdict", "confidence_words"]

Status = Literal["leak", "slight", "levelled", "ok", "insufficient"]

#: Each status in plain words, as reports print it.
STATUS_WORDS: Mapping[str, str] = {
    "leak": "leak",
    "slight": "growing slightly",
    "levelled": "levelled off",
    "ok": "ok",
    "insufficient": "not enough points",
}


@dataclass(frozen=True)
class Verdict:
    """The verdict on one metric's series.

    :ivar key: the metric's full key (``memprobe/process/rss_bytes``).
    :ivar status: ``"leak"``, ``"slight"`` (growing slightly), ``"levelled"``
        (grew, then levelled off), ``"ok"`` or ``"insufficient"``; see :data:`STATUS_WORDS`.
    :ivar slope_per_step: Theil-Sen growth per step (per sample; per call in
        :func:`memprobe.check_leaks`), after warm-up.
    :ivar slope_low: lower bound of the slope's confidence interval.
    :ivar slope_high: upper bound.
    :ivar rate_per_hour: growth per hour of wall time, when the samples have times.
    :ivar n_points: points judged (after warm-up).
    :ivar warmup_points: points dropped as warm-up.
    :ivar growth: fitted growth over the points judged, ``slope * x-span``.
    :ivar noise: robust noise of the residuals (1.4826 x MAD).
    :ivar culprits: the most likely causes, most likely first: sites
        (``my_env.py:26 → numpy/_core/numeric.py:232``) or type names.
    :ivar note: the kind of growth in plain words, or another hint.
    :ivar holders: referrer chains up to what keeps the leaking type's instances alive
        (``app.Session <- list[3] <- module app global 'CACHE'``), from the alarm's capture.
    :ivar kind: the kind of growth of a leak (a key of :data:`memprobe.KINDS`), or None.
    :ivar prefix: the prefix of ``key`` (``memprobe``).
    :ivar step: what one step is: ``"sample"`` or ``"call"``.
    :ivar span_points: the steps the scale judged spans (the last ``span_points``
        steps; 0 when the whole series was judged at one scale).
    :ivar span_seconds: the wall time that scale spans, when the samples have times.
    :ivar hours_to_oom: at ``rate_per_hour``, the hours until the process reaches its
        nearest memory limit (:func:`memprobe.oom_headroom`); set by the live alarm
        on ``process/rss_bytes``, None when not growing or unknown.
    :ivar unit: the metric's declared unit (:class:`memprobe.Metric`), ``"bytes"``...
    :ivar confidence: of the slope's interval ``[slope_low, slope_high]`` (two-sided),
        the ``confidence`` option the metric was judged with.
    """

    key: str
    status: Status
    slope_per_step: float
    slope_low: float
    slope_high: float
    rate_per_hour: float | None
    n_points: int
    warmup_points: int
    growth: float = 0.0
    noise: float = 0.0
    culprits: tuple[str, ...] = ()
    note: str = ""
    kind: str | None = None
    prefix: str = ""
    step: str = "sample"
    holders: tuple[str, ...] = ()
    span_points: int = 0
    span_seconds: float | None = None
    hours_to_oom: float | None = None
    unit: str = ""
    confidence: float = 0.95

    @property
    def leaking(self) -> bool:
        """True when the status is ``"leak"``."""
        return self.status == "leak"

    @property
    def leak(self) -> bool:
        """Same as :attr:`leaking`."""
        return self.leaking

    @property
    def culprit(self) -> str | None:
        """The most likely cause, or None."""
        return self.culprits[0] if self.culprits else None

    @property
    def metric(self) -> str:
        """The key without its prefix: ``process/rss_bytes``."""
        return short_key(self.key, self.prefix)

    @property
    def site(self) -> str | None:
        """For a site or type series (``tracemalloc/top/<site>/size_bytes``), the
        site or type as a report shows it; else None."""
        probe, metric = split_short(self.metric)
        name = site_name(metric) if probe else None
        return format_culprit(name) if name is not None else None

    def describe(self) -> str:
        """One line in words: ``process/rss_bytes: leak, +1.1 MiB per episode (+29.5
        MiB/hour), 95% interval +1.0 to +1.2 MiB, over 60 episodes (warm-up 5)``, then
        the kind, the culprits, the note and what holds the leak."""
        s = f"{self.metric}: {STATUS_WORDS.get(self.status, self.status)}"
        if self.n_points and self.slope_high:
            s += f", {fmt_value(self.slope_per_step, self.unit, signed=True)} per {self.step}"
            # Per hour of calls made back to back says nothing about the program's pace.
            if self.rate_per_hour is not None and self.step != "call":
                s += f" ({fmt_value(self.rate_per_hour, self.unit, signed=True)}/hour)"
            s += (f", {confidence_words(self.confidence)} interval "
                  f"{fmt_interval(self.slope_low, self.slope_high, self.unit)}")
        if self.span_points:
            s += ", " + scale_words(self.span_points, self.span_seconds, self.step,
                                    self.warmup_points)
        else:
            s += f", over {self.n_points} {self.step}s (warm-up {self.warmup_points})"
        if self.hours_to_oom is not None:
            s += f"; out of memory in {duration_words(self.hours_to_oom * 3600)} at this rate"
        if self.kind:
            s += f"; kind: {self.kind}"
        if self.culprits:
            s += "; culprits: " + ", ".join(self.culprits[:5])
        if self.note:
            s += f"; {self.note}"
        if self.holders:
            s += f"; held by: {self.holders[0]}"
        return s


def confidence_words(confidence: float) -> str:
    """A confidence as a percentage: ``95%``, ``99.9%``."""
    return f"{confidence * 100:.10g}%"


@dataclass(frozen=True)
class Report:
    """Verdicts on every metric worth judging, the ranked sites and types, the kind of leak.

    :ivar verdicts: ``{key: Verdict}`` for the whole-process metrics
        (rss, num_fds, filtered bytes, object count...).
    :ivar sites: verdicts on tracemalloc sites, leaking and fastest-growing first.
    :ivar types: verdicts on object types, leaking and fastest-growing first.
    :ivar prefix: the prefix of the keys judged.
    """

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    sites: tuple[Verdict, ...] = ()
    types: tuple[Verdict, ...] = ()
    prefix: str = ""

    @property
    def leaking(self) -> list[Verdict]:
        """The whole-process verdicts whose status is ``"leak"``, most telling kind first."""
        return sorted((v for v in self.verdicts.values() if v.leaking), key=_kinds.rank)

    @property
    def has_leak(self) -> bool:
        """True when any whole-process metric leaks."""
        return any(v.leaking for v in self.verdicts.values())

    @property
    def leaking_metrics(self) -> list[str]:
        """Metrics (without prefix) that leak, e.g. ``["process/num_fds"]``."""
        return [v.metric for v in self.leaking]

    @property
    def culprits(self) -> list[str]:
        """Leaking sites then leaking types, fastest first, as reports show them."""
        return [v.site or v.metric for v in (*self.sites, *self.types) if v.leaking]

    @property
    def kind(self) -> str | None:
        """The kind of the leak (a key of :data:`memprobe.KINDS`), the most telling one when
        several metrics leak; None when nothing leaks."""
        for v in self.leaking:
            if v.kind:
                return v.kind
        return None

    @property
    def culprit(self) -> str | None:
        """The most likely cause of the leak: a site, a type, or the kind's words."""
        for v in self.leaking:
            if v.culprit:
                return v.culprit
        kind = self.kind
        return _kinds.KINDS[kind] if kind else None

    leak, leaks, grew, suspects = has_leak, leaking, leaking_metrics, culprits  # 1st release

    def get(self, metric: str) -> Verdict | None:
        """The verdict on ``metric``, by full key or without prefix (``process/rss_bytes``)."""
        if metric in self.verdicts:
            return self.verdicts[metric]
        for v in self.verdicts.values():
            if v.metric == metric:
                return v
        return None

    def __str__(self) -> str:
        lines = [v.describe() for v in self.verdicts.values()]
        if self.kind:
            lines.insert(0, f"LEAK ({self.kind}): {_kinds.KINDS[self.kind]}")
        for title, group in (("sites", self.sites), ("types", self.types)):
            leaking = [v for v in group if v.leaking]
            if leaking:
                lines.append(f"growing {title}:")
                lines += [
                    f"  {v.site}: {fmt_value(v.slope_per_step, v.unit, signed=True)}/{v.step}"
                    for v in leaking[:10]
                ]
        return "\n".join(lines) if lines else "no metrics to judge"
