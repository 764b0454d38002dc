"""What the pytest plugin runs for one test and what it says: the leak check and the peak
limit, the failure message, the session summary.

One wording from the failure to the summary: a test's *headline* names one
metric (the first of the metrics judged that failed, else the first judged)
and is written once, here, for both. Amounts are written by
:func:`memprobe._format.fmt_value`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import MemprobeError
from .._format import fmt_value
from ..leak._kinds import KINDS
from ..leaks import CHECKED_METRICS
from ._options import Judged, Settings

#: The metrics a leak check judges unless the marker names others (assert_no_leak's default).
DEFAULT_METRICS = CHECKED_METRICS
#: Extra calls of a failing test's body inside a memray window (``--memprobe-native``).
NATIVE_CALLS = 5


class PeakError(MemprobeError, AssertionError):
    """A test's traced memory rose above its ``memprobe_limit_peak``."""


def headline(v: Any) -> str:
    """``tracemalloc/filtered_bytes grew +430.6 KiB over 23 calls (+19.6 KiB per call)``."""
    grew, per_step = (fmt_value(x, v.unit, signed=True) for x in (v.growth, v.slope_per_step))
    return f"{v.metric} grew {grew} over {v.n_points} {v.step}s ({per_step} per {v.step})"


def _primary(report: Any, metrics: Sequence[str]) -> Any:
    found = [v for m in metrics if (v := report.get(m)) is not None]
    failing = [v for v in found if v.leaking]
    return (failing or found or [None])[0]


def _culprits(report: Any, failing: Sequence[Any]) -> list[tuple[str, Any]]:
    """``(culprit, site verdict or None)``: the leaking sites and types, then the failing
    verdicts' own culprits not among them."""
    out: list[tuple[str, Any]] = []
    for v in (*report.sites, *report.types):
        if v.leaking and v.site:
            out.append((v.site, v))
    named = {c for c, _ in out}
    for v in failing:
        for c in v.culprits:
            if c not in named:
                named.add(c)
                out.append((c, None))
    return out


def _native_sites(body: Callable[[], Any], top: int) -> list[str]:
    from ..probes.memray import MemrayWindow

    window = MemrayWindow(native_traces=True)
    window.open()
    try:
        for _ in range(NATIVE_CALLS):
            body()
    except BaseException:
        window.abandon()
        raise
    return [f"{s.site}: {fmt_value(s.size_bytes, 'bytes')} in {s.count} blocks"
            for s in window.close()[:top]]


def _leak(nodeid: str, body: Callable[[], Any], opts: dict[str, Any], s: Settings,
          record: Callable[[Judged], None]) -> None:
    from .._errors import LeakError
    from ..leaks import assert_no_leak

    __tracebackhide__ = True
    metrics = tuple(opts.get("metrics", DEFAULT_METRICS))
    report: Any
    try:
        report = assert_no_leak(body, **opts)
    except LeakError as exc:
        report = exc.report
        failing = [v for m in metrics if (v := report.get(m)) is not None and v.leaking]
        culprits = _culprits(report, failing)
        allowed = [c for c, _ in culprits if s.allowed(c)]
        main = _primary(report, metrics)
        judged = Judged(nodeid, True, main.metric, headline(main),
                        growth_bytes=float(main.growth), allowed=allowed)
        if culprits and len(allowed) == len(culprits):  # known, bounded: reported, not failing
            record(dataclasses.replace(judged, failed=False,
                                       culprit=culprits[0][0]))
            return
        bad = [c for c in culprits if c[0] not in allowed]
        judged.culprit = bad[0][0] if bad else ""
        native = _native_sites(body, s.top) if s.native else []
        record(judged)
        raise LeakError(_leak_message(judged, failing, report, culprits, allowed, native,
                                      opts, s.top), report) from None
    main = _primary(report, metrics)
    if main is not None:
        record(Judged(nodeid, False, main.metric, headline(main),
                      growth_bytes=float(max(main.growth, 0))))


def _leak_message(judged: Judged, failing: Sequence[Any], report: Any,
                  culprits: Sequence[tuple[str, Any]], allowed: Sequence[str],
                  native: Sequence[str], opts: dict[str, Any], top: int) -> str:
    tolerated = fmt_value(opts.get("max_growth_bytes", 100_000), "bytes")
    lines = [f"{judged.headline}; tolerated: {tolerated}"]
    lines += [f"  {v.describe()}" for v in failing]
    if report.kind:
        lines.append(f"kind: {report.kind} ({KINDS[report.kind]})")
    if culprits:
        lines.append(f"culprits, fastest-growing first (top {top}):")
        for c, v in culprits[:top]:
            rate = (f": {fmt_value(v.slope_per_step, v.unit, signed=True)} per {v.step}"
                    if v is not None else "")
            lines.append(f"  {c}{rate}" + ("  (allowed)" if c in allowed else ""))
    if native:
        lines.append(f"native sites alive after {NATIVE_CALLS} more calls (memray):")
        lines += [f"  {n}" for n in native]
    return "\n".join(lines)


def _peak_message(judged: Judged, result: Any, limit: int) -> str:
    lines = [judged.headline]
    if result.sites:
        when = ("when it was highest" if result.captured_bytes > limit else
                "still alive at the end (the peak was shorter than the watcher's 2 ms)")
        lines.append(f"top allocating sites {when}:")
        lines += [f"  {site}: {fmt_value(size, 'bytes', True)}" for site, size in result.sites]
    return "\n".join(lines)


_PRELOADED: list[bool] = []


def _preload() -> None:
    """Import what a check imports (the leak check, the Prober, its probes, psutil) before
    tracing starts: modules imported while tracing stay traced, and every sample of the
    check would walk their blocks again."""
    if _PRELOADED:
        return
    from .. import leaks  # noqa: F401
    from ..engine._prober import Prober

    Prober(["process"], load_entrypoints=False).sample()
    _PRELOADED.append(True)


def run_checks(nodeid: str, body: Callable[[], Any], opts: dict[str, Any] | None,
               limit: int | None, s: Settings, record: Callable[[Judged], None]) -> None:
    """Run ``body`` under the leak check (``opts``) and the peak limit (``limit``) asked for."""
    from .._tracing import acquire_tracing, release_tracing
    from ..leak._peak import watch_peak

    __tracebackhide__ = True
    _preload()

    def leak_checked() -> None:
        if opts is not None:
            _leak(nodeid, body, opts, s, record)
        else:
            body()

    acquire_tracing(s.frames)  # started here, the check keeps these frames
    try:
        if limit is None:
            leak_checked()
            return
        _, result = watch_peak(leak_checked, limit, frames=s.frames, top=s.top)
    finally:
        release_tracing()
    over = result.peak_bytes > limit
    judged = Judged(nodeid, over, "tracemalloc/peak_bytes",
                    f"traced memory peaked {fmt_value(result.peak_bytes, 'bytes', True)} "
                    f"above the start, {'over' if over else 'within'} the limit of "
                    f"{fmt_value(limit, 'bytes')}",
                    culprit=result.sites[0][0] if result.sites else "",
                    growth_bytes=float(result.peak_bytes))
    record(judged)
    if over:
        raise PeakError(_peak_message(judged, result, limit))


def summary_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """The session summary: counts, the worst growth, then each failure's headline."""
    judged = [r for r in results if not r.get("refused")]
    refused = [r for r in results if r.get("refused")]
    leaks = [r for r in judged if r["failed"] and r["metric"] != "tracemalloc/peak_bytes"]
    peaks = [r for r in judged if r["failed"] and r["metric"] == "tracemalloc/peak_bytes"]
    allowed = [r for r in judged if not r["failed"] and r.get("allowed")]
    head = f"{len({r['nodeid'] for r in judged})} test(s) judged, {len(leaks)} leaking"
    if peaks:
        head += f", {len(peaks)} over their peak limit"
    if allowed:
        head += f", {len(allowed)} passing with allowed culprits"
    if refused:
        head += f", {len(refused)} not judged"
    lines = [head]
    grew = [r for r in judged if r["metric"] != "tracemalloc/peak_bytes" and r["headline"]]
    if grew:
        worst = max(grew, key=lambda r: r["growth_bytes"])
        if worst["growth_bytes"] > 0:
            lines.append(f"worst growth: {worst['nodeid']}: {worst['headline']}")
    for word, group in (("LEAK", leaks), ("PEAK", peaks)):
        for r in group:
            culprit = f", culprit {r['culprit']}" if r["culprit"] else ""
            lines.append(f"{word} {r['nodeid']}: {r['headline']}{culprit}")
    for r in allowed:
        lines.append(f"allowed {r['nodeid']}: {r['headline']}; allowed culprits: "
                     f"{', '.join(r['allowed'])}")
    for r in refused:
        lines.append(f"not judged {r['nodeid']}: {r['refused']}")
    return lines
