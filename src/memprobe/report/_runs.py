"""JSONL files read into runs (one per process) and summarized, without printing.

A run is the samples of one process, told apart by pid and tags (``role``,
``env_runner``...), whatever the key prefix (``memprobe/`` for ``memprobe run``
and a plain Prober, ``memprobe/driver/`` for the RLlib driver...). A summary
holds what every renderer (text, HTML, PNG) shows: per-metric start, end,
peak, growth and verdict, the notes, the suspect sites, and hints.
"""

from __future__ import annotations

import heapq
import inspect
import json
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import keys
from .._errors import MemprobeWarning
from .._registry import describe_key
from .._sample import Sample
from ..leak._garbage import weighed
from ..leak._kinds import CAPTURE_NATIVE_HINT, NATIVE_TRACES_HINT
from ..leak._verdicts import (
    DEFAULT_METRICS,
    STATUS_WORDS,
    Verdict,
    analyze,
    analyze_samples,
    format_culprit,
)
from ._digest import PHASE_METRICS, RunDigest, digest_of
from ._jsonl import JsonlReadError, iter_records
from ._phase_growth import PhaseGrowth

#: Samples a verdict needs (the ``min_points`` of :func:`memprobe.analyze`).
MIN_SAMPLES = inspect.signature(analyze).parameters["min_points"].default
#: The probes that name a leak's source line or type.
NAMING_PROBES = ("tracemalloc", "objects", "memray")
#: A native verdict's way to the C stack in a run of ``memprobe run``: its flags.
RUN_NATIVE_HINTS = {NATIVE_TRACES_HINT: "memprobe run's --probe-option memray.native_traces="
                    "true names the C function", CAPTURE_NATIVE_HINT: "memray in memprobe "
                    "run's --probes, with --probe-option memray.native_traces=true, names the "
                    "C function"}


@dataclass
class ProcessRun:
    """One process (pid + tags), possibly from several files.

    :func:`load_runs` gives its samples as a :class:`memprobe.report._digest.RunDigest`, what a
    report needs of them in bounded memory; a run made from ``samples`` in memory gets
    its digest when first asked.
    """

    pid: int
    tags: dict[str, Any]
    files: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    prefix: str = keys.DEFAULT_PREFIX
    _digest: RunDigest | None = field(default=None, repr=False)

    @property
    def digest(self) -> RunDigest:
        """What the report keeps of the samples (made from :attr:`samples` when not read)."""
        if self._digest is None:
            self._digest = digest_of(self.samples, self.prefix)
        return self._digest

    @property
    def label(self) -> str:
        """``pid 12 (role=driver, env_runner=0)``: the tags, the command left out."""
        tags = ", ".join(f"{k}={v}" for k, v in self.tags.items() if k != "command")
        return f"pid {self.pid}" + (f" ({tags})" if tags else "")

    @property
    def n_samples(self) -> int:
        """Samples of the process."""
        return self.digest.count

    @property
    def start_seconds(self) -> float:
        """Unix seconds of the first sample."""
        return self.digest.first_seconds

    @property
    def span_seconds(self) -> float:
        """Seconds from the first sample to the last."""
        return self.digest.span_seconds


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
    """Read JSONL files into one run per (pid, tags), its samples in time order.

    The samples stream through each run's :class:`memprobe.report._digest.RunDigest`: memory
    per run is bounded whatever the files' length; the runs held grow with the number
    of processes. A run whose samples come out of time order (its files given newest
    first, a clock set back) is read again: merged from its files when each holds its
    samples in order, else sorted in memory.

    :param on_warning: called with each warning's text (bad lines); default: re-warned.
    :param on_file: called with ``(i, n, path)`` before each file is read.
    :raises JsonlReadError: a file is missing, not a regular file, or not memprobe JSONL.
    """
    import os

    for path in files:  # every path checked before any is read
        if not os.path.lexists(path):
            raise JsonlReadError(path, "no such file")
    runs: dict[str, ProcessRun] = {}
    order: dict[str, _Order] = {}
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
                sample = rec.sample
                gkey = _run_key(sample.pid, rec.tags)
                run = runs.get(gkey)
                if run is None:
                    run = runs[gkey] = ProcessRun(sample.pid, rec.tags)
                    run._digest = RunDigest()
                    o = order[gkey] = _Order()
                else:
                    o = order[gkey]
                if o.path != path:
                    o.path, o.file_last = path, -math.inf
                    if path not in run.files:
                        run.files.append(path)
                t = sample.time_seconds
                if t < o.file_last:
                    o.files_sorted = False
                o.file_last = t
                if run._digest is not None:
                    if t < o.last:  # out of time order: read again below
                        run._digest = None
                    else:
                        o.last = t
                        run._digest.add(sample)
        for w in caught:
            if on_warning is not None and issubclass(w.category, MemprobeWarning):
                on_warning(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    out = []
    for gkey, run in runs.items():
        if run._digest is None:
            run._digest = _reread(gkey, run.files, order[gkey].files_sorted)
        digest = run._digest.finish()
        run.prefix = digest.prefix or keys.DEFAULT_PREFIX
        if not math.isfinite(digest.span_seconds):  # times of +-1.7e308: no rate can be given
            text = (f"{', '.join(run.files)}: {run.label}: its times span more than a float "
                    f"holds ({digest.first_seconds:g} to "
                    f"{digest.last_seconds:g} s); not reported")
            _warn(text, on_warning)
            continue
        out.append(run)
    return out


def _run_key(pid: int, tags: Mapping[str, Any]) -> str:
    return json.dumps([pid, tags], sort_keys=True, default=str)


@dataclass
class _Order:
    """Whether a run's samples come in time order, overall and within each file."""

    last: float = -math.inf  # the latest time fed
    path: str = ""  # the file read now, and the latest time in it
    file_last: float = -math.inf
    files_sorted: bool = True


def _reread(gkey: str, files: Sequence[str], files_sorted: bool) -> RunDigest:
    """The digest of a run whose samples were out of time order, read again from its files
    (their warnings were given at the first reading)."""
    def samples(path: str) -> Iterator[Sample]:
        for rec in iter_records(path):
            if _run_key(rec.sample.pid, rec.tags) == gkey:
                yield rec.sample

    digest = RunDigest()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        streams = [samples(p) for p in files]
        if files_sorted:  # each file in order: merged (ties in the files' order)
            merged: Iterable[Sample] = heapq.merge(*streams, key=lambda s: s.time_seconds)
        else:
            merged = sorted((s for st in streams for s in st), key=lambda s: s.time_seconds)
        try:
            for s in merged:
                digest.add(s)
        except (JsonlReadError, OSError):  # a file gone since it was read: what was read
            pass
    return digest


def _warn(text: str, on_warning: Callable[[str], None] | None) -> None:
    if on_warning is not None:
        on_warning(text)
    else:
        warnings.warn(text, MemprobeWarning, stacklevel=3)


# -- summarizing -----------------------------------------------------------------------------
def _detection_point(xs: Sequence[float], ys: Sequence[float], ts: Sequence[float],
                     key: str) -> int | None:
    """Index of the first prefix of the series (checked at up to 24 lengths) judged a leak
    (the series as the digest keeps it: every point up to ``PLOT_POINTS``, else thinned)."""
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
                        f"growing {fmt(v.slope_per_step, unit, True)}/{v.step}"))
    if not out:  # named from what tracing windows or memray saw, not from site series
        named = dict.fromkeys(c for v in report.leaking for c in v.culprits)
        out = [(format_culprit(c), f"named by the {v.kind} verdict")
               for c, v in ((c, next(v for v in report.leaking if c in v.culprits))
                            for c in named)][:n]
    if out:
        return "top suspects", out
    last = run.digest.last[-1].values if run.digest.last else {}
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
        return f"LEAK {fmt(v.slope_per_step, m.unit, True)}/{v.step}"
    if v.status == "slight" and v.rate_per_hour is not None and math.isfinite(v.rate_per_hour):
        return f"growing slightly {fmt(v.rate_per_hour, m.unit, True)}/h{oom}"
    if v.status == "insufficient":
        return "too few samples"
    return STATUS_WORDS.get(v.status, str(v.status))


def summarize(run: ProcessRun) -> RunSummary:
    """The summary of one run: metrics with verdicts, notes, suspects, hints."""
    digest = run.digest
    # The whole-process metrics judged at every scale from the tiers, the sites and types
    # on the latest samples: as the live alarm judges a Prober's history.
    report = analyze_samples(digest.judged_samples(), prefix=run.prefix, tiers=digest.tiers,
                             collections=tuple(digest.full_collections.events))
    head = keys.prefix_path(run.prefix)
    out: list[MetricSummary] = []
    for short in DEFAULT_METRICS:
        key = head + short
        st = digest.stats.get(key)
        if st is None:
            continue
        ms = MetricSummary(key, short, describe_key(key, run.prefix).unit,
                           st.start, st.end, st.peak, report.verdicts.get(key))
        if ms.leak:
            xs, ts, ys = digest.series(key)
            j = _detection_point(xs, ys, ts, key)
            if j is not None:
                ms.detected_at = (ts[j], ys[j])
        if "command" in run.tags and ms.verdict is not None:  # memprobe run's own flags
            for prober_form, flags in RUN_NATIVE_HINTS.items():
                ms.verdict = replace(ms.verdict, note=ms.verdict.note.replace(prober_form, flags))
        out.append(ms)
    # With the notes of the leaks, why a growth of live blocks is none (garbage, or
    # nothing to tell it from garbage).
    notes = list(dict.fromkeys(m.verdict.note for m in out if m.verdict is not None and (
        (m.leak and m.verdict.note) or weighed(m.verdict))))
    title, suspects = _suspects(run, report)
    # The last sample and its probes (not the alarm's capture line, which has none).
    capture_key = keys.make_key(run.prefix, "capture", "duration_seconds")
    last = [s for s in digest.last if capture_key not in s.values][-1:]
    probes = {keys.split_short(keys.short_key(k, run.prefix))[0]
              for s in last for k in s.values}
    hints = []
    short_of = [m.verdict for m in out
                if m.verdict is not None and m.verdict.status == "insufficient"]
    if short_of:
        busy = _busy(run, last[0].values, probes) if last else None
        hints.append(_insufficient_hint(short_of, digest.count, run.tags, busy))
    if any(m.leak for m in out) and not probes & set(NAMING_PROBES):
        hints.append("to name the line that leaks, rerun with --probes process,gc,tracemalloc "
                     "(or add objects to name the type of object that piles up)")
    summary = RunSummary(run, out, report, notes, title, suspects, hints)
    summary.phase_metrics = [m for m in out if m.short in PHASE_METRICS][:4]
    assert digest.phases is not None
    summary.phases = digest.phases.result([m.key for m in summary.phase_metrics])
    summary.marks, summary.spans = digest.marks.result()
    summary.captured = _captured(run)
    summary.holders = _holders(run)
    if summary.captured:  # the capture named the line: no need to rerun for it
        summary.hints = [h for h in hints if not h.startswith("to name the line")]
    return summary


def _insufficient_hint(verdicts: Sequence[Verdict], n_samples: int,
                       tags: Mapping[str, Any], busy: str | None = None) -> str:
    """Why no verdict could be given, in figures true for this run: the samples of the
    metric itself (a probe run less often than every sample has fewer than the run)."""
    v = verdicts[0]  # the first metric of the table (rss when it is there)
    points = v.warmup_points + v.n_points
    what = keys.short_key(v.key, v.prefix)
    if points < n_samples:
        return (f"{what} has {points} of the {n_samples} samples (its probe ran less "
                f"often), need {MIN_SAMPLES if points < MIN_SAMPLES else 2 * MIN_SAMPLES} "
                "— run longer or sample that probe more often")
    more = _how_to_sample_more(tags, busy)
    if points < MIN_SAMPLES:
        return f"need {MIN_SAMPLES} samples, got {points} — {more}"
    return (f"need {2 * MIN_SAMPLES} samples to tell a leak from a warm-up, got "
            f"{points} — {more}")


def _how_to_sample_more(tags: Mapping[str, Any], busy: str | None = None) -> str:
    """How this process gets more samples: by who wrote its file (its tags), and whether
    sampling took the time between samples (``busy``, from :func:`_busy`)."""
    if "command" in tags:  # memprobe run
        return busy or "run longer or lower --interval"
    if tags.get("role") in ("driver", "learner"):  # memprobe_rllib: one sample per train()
        return "run more train() iterations (the driver and Learners sample once per iteration)"
    return "run longer or sample more often"


#: From this part of the time between samples on, memprobe run's --budget (0.2) spaced them.
BUDGET_SPACED = 0.15


def _busy(run: ProcessRun, last: Mapping[str, Any], probes: set[str]) -> str | None:
    """When the last sample (its values ``last``, of ``probes`` and the Prober's
    sections) took from ``BUDGET_SPACED`` of the mean time between samples (``memprobe
    run`` waits ``--interval`` after each, or longer within its ``--budget``), what to do
    instead of lowering ``--interval``, naming the slowest probe; else None."""
    d = run.digest
    took = last.get(keys.make_key(run.prefix, "overhead", "sample_seconds"))
    if d.count < 2 or not isinstance(took, (int, float)):
        return None
    gap = d.span_seconds / (d.count - 1)
    if took < BUDGET_SPACED * gap:
        return None
    cost = {p: last.get(keys.make_key(run.prefix, "overhead", f"{p}_seconds"), 0.0)
            for p in probes - set(keys.PROBER_SECTIONS)}
    p = max(cost, key=lambda name: cost[name], default="")
    slowest = f" ({p} {cost[p]:.2g} s)" if p else ""
    what = "run longer" if took >= 0.5 * gap else "run longer or raise --budget"
    return (f"{what}: a sample took {took:.2g} s{slowest} of the {gap:.2g} s between "
            "samples, so a lower --interval adds few")


def _captured(run: ProcessRun, n: int = 5) -> list[tuple[str, str]]:
    """The culprits the alarm's deep capture wrote (keys under ``<prefix>/capture/``)."""
    head = keys.join_prefix(run.prefix, "capture")
    capture_key = keys.make_key(run.prefix, "capture", "duration_seconds")
    out: list[tuple[str, str]] = []
    for s in run.digest.captures:
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
    return run.digest.holders[:n]


def summarize_all(runs: Sequence[ProcessRun]) -> list[RunSummary]:
    """The summaries of the runs that have samples."""
    return [summarize(r) for r in runs if r.n_samples]
