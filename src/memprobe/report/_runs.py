"""JSONL files read into runs (one per process) and summarized, without printing.

A run is the samples of one process, told apart by pid and tags (``role``,
``env_runner``...), whatever the key prefix (``memprobe/`` for ``memprobe run``
and a plain Prober, ``memprobe/driver/`` for the RLlib driver...). A summary
holds what every renderer (text, HTML, PNG) shows: per-metric start, end,
peak, growth and verdict, the notes, the suspect sites, and hints.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import keys
from .._errors import MemprobeWarning
from .._jsonl_fields import HOLDERS
from .._registry import describe_key
from .._sample import Sample
from ..leak._verdicts import (
    DEFAULT_METRICS,
    STATUS_WORDS,
    Verdict,
    analyze,
    analyze_samples,
    format_culprit,
)
from ._jsonl import JsonlReadError, iter_records
from ._phase_growth import PhaseGrowth, mark_times, phase_growth

#: Samples a verdict needs (the ``min_points`` of :func:`memprobe.analyze`).
MIN_SAMPLES = inspect.signature(analyze).parameters["min_points"].default
#: The probes that name a leak's source line or type.
NAMING_PROBES = ("tracemalloc", "objects", "memray")


@dataclass
class ProcessRun:
    """The samples of one process (pid + tags), possibly from several files."""

    pid: int
    tags: dict[str, Any]
    files: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    prefix: str = keys.DEFAULT_PREFIX

    @property
    def label(self) -> str:
        """``pid 12 (role=driver, env_runner=0)``: the tags, the command left out."""
        tags = ", ".join(f"{k}={v}" for k, v in self.tags.items() if k != "command")
        return f"pid {self.pid}" + (f" ({tags})" if tags else "")

    @property
    def span_seconds(self) -> float:
        """Seconds from the first sample to the last."""
        return self.samples[-1].time_seconds - self.samples[0].time_seconds if self.samples else 0.0


@dataclass
class MetricSummary:
    """One whole-process metric of a run: start, end, peak, verdict, unit."""

    key: str
    short: str
    unit: str
    start: float
    end: float
    peak: float
    verdict: Any = None
    #: (time, value) where the leak was first seen, when it leaks.
    detected_at: tuple[float, float] | None = None

    @property
    def growth(self) -> float:
        """End minus start."""
        return self.end - self.start

    @property
    def leak(self) -> bool:
        """The verdict is a leak."""
        return self.verdict is not None and self.verdict.status == "leak"


@dataclass
class RunSummary:
    """What the reports show for one run."""

    run: ProcessRun
    metrics: list[MetricSummary]
    report: Any
    notes: list[str]
    #: ``"top suspects"`` when sites or types leak, else ``"largest allocation sites"``.
    suspects_title: str
    suspects: list[tuple[str, str]]
    #: What to do next: run longer, or name the leaking line.
    hints: list[str]
    #: Growth per phase (empty when no sample is in a phase), outside every span last.
    phases: list[PhaseGrowth] = field(default_factory=list)
    #: The metrics (short keys) ``phases`` gives the growth of.
    phase_metrics: list[MetricSummary] = field(default_factory=list)
    #: Marks as ``(time, label)`` and spans as ``(start, end, label)``, for the plot.
    marks: list[tuple[float, str]] = field(default_factory=list)
    spans: list[tuple[float, float, str]] = field(default_factory=list)
    #: What the alarm's deep capture named: ``(site or type, detail)``.
    captured: list[tuple[str, str]] = field(default_factory=list)
    #: The referrer chains the capture walked, up to what keeps the leaking type alive.
    holders: list[str] = field(default_factory=list)

    @property
    def n_leaks(self) -> int:
        """Leaking whole-process metrics."""
        return sum(1 for m in self.metrics if m.leak)


# -- reading ---------------------------------------------------------------------------------
def load_runs(
    files: Sequence[str],
    *,
    on_warning: Callable[[str], None] | None = None,
    on_file: Callable[[int, int, str], None] | None = None,
) -> list[ProcessRun]:
    """Read JSONL files into one run per (pid, tags), samples in time order.

    :param on_warning: called with each warning's text (bad lines); default: re-warned.
    :param on_file: called with ``(i, n, path)`` before each file is read.
    :raises JsonlReadError: a file is missing, not a regular file, or not memprobe JSONL.
    """
    import os

    for path in files:  # every path checked before any is read
        if not os.path.lexists(path):
            raise JsonlReadError(path, "no such file")
    runs: dict[str, ProcessRun] = {}
    read: dict[tuple[int, int], str] = {}  # (st_dev, st_ino) of each file read
    for i, path in enumerate(files, start=1):
        if on_file is not None:
            on_file(i, len(files), path)
        try:
            st = os.stat(path)
            ident = (st.st_dev, st.st_ino)
        except OSError:
            ident = None  # iter_records names the fault
        if ident is not None and ident in read:
            text = (f"{path}: the same file as {read[ident]} (a second name or a hard "
                    "link); read once")
            _warn(text, on_warning)
            continue
        if ident is not None:
            read[ident] = path
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for rec in iter_records(path):
                gkey = json.dumps([rec.sample.pid, rec.tags], sort_keys=True, default=str)
                run = runs.get(gkey)
                if run is None:
                    run = runs[gkey] = ProcessRun(rec.sample.pid, rec.tags)
                if path not in run.files:
                    run.files.append(path)
                run.samples.append(rec.sample)
        for w in caught:
            if on_warning is not None and issubclass(w.category, MemprobeWarning):
                on_warning(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    out = []
    for run in runs.values():
        run.samples.sort(key=lambda s: s.time_seconds)
        if not math.isfinite(run.span_seconds):  # times of +-1.7e308: no rate can be given
            text = (f"{', '.join(run.files)}: {run.label}: its times span more than a float "
                    f"holds ({run.samples[0].time_seconds:g} to "
                    f"{run.samples[-1].time_seconds:g} s); not reported")
            _warn(text, on_warning)
            continue
        out.append(run)
        for s in run.samples:
            prefix = keys.infer_prefix(s.values)
            if prefix is not None:
                run.prefix = prefix
                break
    return out


def _warn(text: str, on_warning: Callable[[str], None] | None) -> None:
    if on_warning is not None:
        on_warning(text)
    else:
        warnings.warn(text, MemprobeWarning, stacklevel=3)


# -- summarizing -----------------------------------------------------------------------------
def _detection_point(xs: list[float], ys: list[float], ts: list[float], key: str) -> int | None:
    """Index of the first prefix of the series (checked at up to 24 lengths) judged a leak."""
    n = len(xs)
    for m in sorted({max(2, round(n * k / 24)) for k in range(1, 25)}):
        if analyze(xs[:m], ys[:m], key=key, times=ts[:m]).status == "leak":
            return m - 1
    return None


def site_of(key: str, prefix: str) -> str:
    """The site or type a per-site key is about (the key's metric if it names none)."""
    try:
        metric = keys.split_key(key, prefix).metric
    except ValueError:
        return key
    return format_culprit(keys.site_name(metric) or metric)


def _suspects(run: ProcessRun, report: Any, n: int = 5) -> tuple[str, list[tuple[str, str]]]:
    out: list[tuple[str, str]] = []
    for v in (*report.sites, *report.types):
        if v.status == "leak" and len(out) < n:
            unit = v.unit or describe_key(v.key, run.prefix).unit
            out.append((site_of(v.key, run.prefix),
                        f"growing {fmt(v.slope_per_step, unit, True)}/step"))
    if not out:  # named from what tracing windows or memray saw, not from site series
        named = dict.fromkeys(c for v in report.leaking for c in v.culprits)
        out = [(format_culprit(c), f"named by the {v.kind} verdict")
               for c, v in ((c, next(v for v in report.leaking if c in v.culprits))
                            for c in named)][:n]
    if out:
        return "top suspects", out
    last = run.samples[-1].values if run.samples else {}
    top = []
    for k, v in last.items():
        found = keys.split_site_key(k, run.prefix)
        if found is not None and found[0] == "tracemalloc" and found[1].section == "top" \
                and found[1].stat == "size_bytes":
            top.append((format_culprit(found[1].name), v))
    top.sort(key=lambda kv: -kv[1])
    return "largest allocation sites", [
        (site, f"{fmt(v, 'bytes')} live at the end") for site, v in top[:n]]


def fmt(v: float, unit: str, signed: bool = False) -> str:
    """A value in its unit (see :func:`memprobe._format.fmt_value`)."""
    from .._format import fmt_value

    return fmt_value(v, unit, signed)


def verdict_text(m: MetricSummary) -> str:
    """``LEAK +30.8 GiB/h``, ``ok``, ``too few samples`` or ``-`` (not judged)."""
    v = m.verdict
    if v is None:
        return "-"
    # The forecast the process made at its last check against its own memory limit.
    oom = "" if v.hours_to_oom is None else f", out of memory in {v.hours_to_oom:.3g} h"
    if v.status == "leak":
        if v.rate_per_hour is not None and math.isfinite(v.rate_per_hour):
            return f"LEAK {fmt(v.rate_per_hour, m.unit, True)}/h{oom}"
        return f"LEAK {fmt(v.slope_per_step, m.unit, True)}/step"
    if v.status == "slight" and v.rate_per_hour is not None and math.isfinite(v.rate_per_hour):
        return f"growing slightly {fmt(v.rate_per_hour, m.unit, True)}/h{oom}"
    if v.status == "insufficient":
        return "too few samples"
    return STATUS_WORDS.get(v.status, str(v.status))


def summarize(run: ProcessRun) -> RunSummary:
    """The summary of one run: metrics with verdicts, notes, suspects, hints."""
    report = analyze_samples(run.samples, prefix=run.prefix)
    head = keys.prefix_path(run.prefix)
    out: list[MetricSummary] = []
    for short in DEFAULT_METRICS:
        key = head + short
        pts = [(i, s) for i, s in enumerate(run.samples) if key in s.values]
        if not pts:
            continue
        ys = [float(s.values[key]) for _, s in pts]
        ms = MetricSummary(key, short, describe_key(key, run.prefix).unit,
                           ys[0], ys[-1], max(ys), report.verdicts.get(key))
        if ms.leak:
            xs = [float(s.step if s.step is not None else i) for i, s in pts]
            ts = [s.time_seconds for _, s in pts]
            j = _detection_point(xs, ys, ts, key)
            if j is not None:
                ms.detected_at = (ts[j], ys[j])
        out.append(ms)
    notes = list(dict.fromkeys(m.verdict.note for m in out if m.leak and m.verdict.note))
    title, suspects = _suspects(run, report)
    hints = []
    short_of = [m.verdict for m in out
                if m.verdict is not None and m.verdict.status == "insufficient"]
    if short_of:
        hints.append(_insufficient_hint(short_of, len(run.samples), run.tags))
    # The probes of the last sample (not the alarm's capture line, which has none).
    capture_key = keys.make_key(run.prefix, "capture", "duration_seconds")
    last = [s for s in run.samples[-2:] if capture_key not in s.values]
    probes = {keys.split_short(keys.short_key(k, run.prefix))[0]
              for s in last[-1:] for k in s.values}
    if any(m.leak for m in out) and not probes & set(NAMING_PROBES):
        hints.append("to name the line that leaks, rerun with --probes process,gc,tracemalloc "
                     "(or add objects to name the type of object that piles up)")
    summary = RunSummary(run, out, report, notes, title, suspects, hints)
    summary.phase_metrics = [m for m in out if m.short in PHASE_METRICS][:4]
    summary.phases = phase_growth(run.samples, [m.key for m in summary.phase_metrics])
    summary.marks, summary.spans = mark_times(run.samples)
    summary.captured = _captured(run)
    summary.holders = _holders(run)
    if summary.captured:  # the capture named the line: no need to rerun for it
        summary.hints = [h for h in hints if not h.startswith("to name the line")]
    return summary


def _insufficient_hint(verdicts: Sequence[Verdict], n_samples: int,
                       tags: Mapping[str, Any]) -> str:
    """Why no verdict could be given, in figures true for this run: the samples of the
    metric itself (a probe run less often than every sample has fewer than the run)."""
    v = verdicts[0]  # the first metric of the table (rss when it is there)
    points = v.warmup_points + v.n_points
    what = keys.short_key(v.key, v.prefix)
    if points < n_samples:
        return (f"{what} has {points} of the {n_samples} samples (its probe ran less "
                f"often), need {MIN_SAMPLES if points < MIN_SAMPLES else 2 * MIN_SAMPLES} "
                "— run longer or sample that probe more often")
    more = _how_to_sample_more(tags)
    if points < MIN_SAMPLES:
        return f"need {MIN_SAMPLES} samples, got {points} — {more}"
    return (f"need {2 * MIN_SAMPLES} samples to tell a leak from a warm-up, got "
            f"{points} — {more}")


def _how_to_sample_more(tags: Mapping[str, Any]) -> str:
    """How this process gets more samples: by who wrote its file (its tags)."""
    if "command" in tags:  # memprobe run
        return "run longer or lower --interval"
    if tags.get("role") in ("driver", "learner"):  # memprobe_rllib: one sample per train()
        return "run more train() iterations (the driver and Learners sample once per iteration)"
    return "run longer or sample more often"


#: Metrics whose growth per phase the reports show, when the run has them (at most 4).
PHASE_METRICS = ("process/rss_bytes", "tracemalloc/filtered_bytes",
                 "tracemalloc/traced_bytes", "objects/total_count", "process/num_fds")


def _captured(run: ProcessRun, n: int = 5) -> list[tuple[str, str]]:
    """The culprits the alarm's deep capture wrote (keys under ``<prefix>/capture/``)."""
    head = keys.join_prefix(run.prefix, "capture")
    capture_key = keys.make_key(run.prefix, "capture", "duration_seconds")
    out: list[tuple[str, str]] = []
    for s in run.samples:
        if capture_key not in s.values:
            continue
        found: list[tuple[float, str, str]] = []
        for k, v in s.values.items():
            site = keys.split_site_key(k, head)
            if site is None:
                continue
            probe, (_section, raw, stat) = site
            name = format_culprit(raw)
            if probe == "objects" and stat == "count":
                found.append((-1.0, name, f"+{int(v)} objects"))
            elif stat == "size_bytes":
                what = "native" if probe == "memray" else "python"
                found.append((float(v), name, f"{what}: {fmt(v, 'bytes')} kept"))
        found.sort(key=lambda f: -f[0])
        out += [(name, detail) for _, name, detail in found[:n]]
    return out


def _holders(run: ProcessRun, n: int = 5) -> list[str]:
    """The referrer chains the alarm's capture lines carry (their ``holders`` field)."""
    out: list[str] = []
    for s in run.samples:
        text = s.labels.get(HOLDERS) if s.labels else None
        if text:
            out += (chain[:600] for chain in text.splitlines())
    return list(dict.fromkeys(out))[:n]


def summarize_all(runs: Sequence[ProcessRun]) -> list[RunSummary]:
    """The summaries of the runs that have samples."""
    return [summarize(r) for r in runs if r.samples]
