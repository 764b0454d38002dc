"""Run summaries as one self-contained HTML page: what the text report shows, plus the plot."""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .. import keys
from ..keys import is_library_site
from ..leak import _windows
from ..leak._series import sample_series
from ._render_text import HEADER, heading, phase_header, phase_rows, rows, totals
from ._runs import RunSummary

_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px}"
    "td{text-align:right}td:first-child{text-align:left}"
    ".leak{color:#c00;font-weight:bold}.hint{color:#555}"
    "img{max-width:100%}"
    ".flame{position:relative;margin:.5em 0;font:11px monospace}"
    ".flame div{position:absolute;height:20px;overflow:hidden;white-space:nowrap;"
    "box-sizing:border-box;border:1px solid #fff;padding:2px 3px}"
    ".flame .user{background:#f2a65a}.flame .lib{background:#9fc5e8}"
    ".flame .c{background:#e06666;color:#fff}"
)
#: Height of one frame's row in the flame graph, px.
_ROW_PX = 22


def kept_stacks(summary: RunSummary) -> tuple[str, list[tuple[str, float]]]:
    """The stacks to draw and their bytes, with a title; or no stacks, and the title
    says why there are none (empty when the run does not leak).

    In order: what the alarm's capture saw kept (tracemalloc's and memray's sites);
    in a run whose verdicts leak, what survived its tracing windows (windowed
    ``tracemalloc`` or ``memray``), else what the leaking sites grew by."""
    head = keys.prefix_path(summary.run.prefix) + "capture"
    stacks: list[tuple[str, float]] = []
    for sample in summary.run.digest.captures:
        if head + "/duration_seconds" not in sample.values:
            continue
        for k, v in sample.values.items():
            try:
                parts = keys.split_key(k, head)
            except ValueError:
                continue
            name = keys.site_name(parts.metric)
            if (name is not None and parts.probe in ("tracemalloc", "memray")
                    and parts.metric.endswith("/size_bytes") and v > 0):
                stacks.append((name, float(v)))
    if stacks:
        return "memory kept, captured when the leak alarm fired", stacks
    report: Any = summary.report
    if not summary.n_leaks:
        return "", []
    windowed = _window_stacks(summary)
    if windowed is not None:
        return windowed
    for v in getattr(report, "sites", ()):
        metric = keys.split_short(keys.short_key(v.key, summary.run.prefix))[1]
        name = keys.site_name(metric)
        if v.leaking and name is not None and v.growth > 0:
            stacks.append((name, float(v.growth)))
    if stacks:
        return "memory the leaking sites grew by", stacks
    return ("no flame graph: no stacks were recorded for this leak (trace it: the "
            "tracemalloc probe, tracemalloc windows with window_steps and period_steps, "
            "or the alarm's capture with on_leak and capture_on_leak)"), []


def _window_stacks(summary: RunSummary) -> tuple[str, list[tuple[str, float]]] | None:
    """What survived the run's tracing windows, by site (the sites the verdicts name:
    surviving at least half of the last windows), as bytes per window; or why nothing
    is drawn; None when no probe ran windowed."""
    prefix = summary.run.prefix

    def keep(key: str) -> bool:
        short = keys.short_key(key, prefix)
        return short in _windows.WINDOW_KEYS or _windows.is_window_site(short)

    series, _, _ = sample_series(summary.run.digest.window_samples(), prefix, keep)
    seen = [e for p in ("tracemalloc", "memray")
            if (e := _windows.window_evidence(series, prefix, p)) is not None]
    if not seen:
        return None
    # The growth to explain: the fastest-growing leaking whole-process size.
    rate = max((v.slope_per_step for v in getattr(summary.report, "leaking", ())
                if v.unit == "bytes"), default=0.0)
    for e in seen:
        # Sites that account for the growth (the loop's counter alive as a window
        # closed is no picture of a leak).
        if e.sites and e.explains(rate):
            return (f"memory surviving the {e.probe} windows (the median of the last "
                    f"{e.windows}, bytes per window of {e.steps_per_window:g} steps)",
                    [(site, per_step * e.steps_per_window) for site, per_step in e.sites])
    names = " and ".join(f"{e.windows} {e.probe} window" + ("s" if e.windows != 1 else "")
                         for e in seen)
    return (f"no flame graph: no site's allocations survived half of the last {names} "
            f"at the rate the leak grows ({seen[0].describe(rate)}): what grows is not "
            "allocated by the traced code inside the windows (native memory, or a leak "
            "between windows); the alarm's capture (on_leak with capture_on_leak, "
            "native=True for memray) records its stacks"), []


def _frame_class(frame: str) -> str:
    if ":" not in frame:
        return "c"  # a C function (memray's native traces)
    return "lib" if is_library_site(frame) else "user"


def flame_graph(stacks: Iterable[tuple[str, float]]) -> str:
    """An icicle of the stacks (``a.py:1--lib.py:2--c_func`` and their bytes): the user's
    frame on top, each frame as wide as the bytes below it. Plain HTML and CSS."""
    tree: dict[str, Any] = {}
    total = 0.0
    for chain, size in stacks:
        total += size
        node = tree
        for frame in chain.split("--"):
            entry = node.setdefault(frame, [0.0, {}])
            entry[0] += size
            node = entry[1]
    if total <= 0:
        return ""
    e = html.escape
    boxes: list[str] = []
    depth_max = 0

    # Depth first, the widest child first, with a stack of its own: a chain of any
    # length (thousands of frames) is walked without recursion.
    def ordered(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        return iter(sorted(node.items(), key=lambda kv: -kv[1][0]))

    stack: list[list[Any]] = [[ordered(tree), 0.0]]  # [children left to draw, their left]
    while stack:
        level = stack[-1]
        item = next(level[0], None)
        if item is None:
            stack.pop()
            continue
        frame, (size, children) = item
        depth = len(stack) - 1
        depth_max = max(depth_max, depth)
        width = 100.0 * size / total
        label = f"{frame} ({_kib(size)})"
        boxes.append(
            f"<div class='{_frame_class(frame)}' title='{e(label)}' "
            f"style='left:{level[1]:.3f}%;width:{width:.3f}%;top:{depth * _ROW_PX}px'>"
            f"{e(label)}</div>")
        stack.append([ordered(children), level[1]])
        level[1] += width

    height = (depth_max + 1) * _ROW_PX
    return f"<div class='flame' style='height:{height}px'>" + "".join(boxes) + "</div>"


def _kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def render(summaries: Sequence[RunSummary], png: bytes | None, files: Sequence[str]) -> str:
    """The page: files read, totals, the plot, then per process the text report's content."""
    e = html.escape
    parts = [
        "<!doctype html>",
        "<html><head><meta charset='utf-8'><title>memprobe report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>memprobe report</h1>",
        f"<p>Files: {e(', '.join(files))}</p>",
        f"<p class='summary'>{e(totals(summaries))}</p>",
    ]
    if png is not None:
        parts.append("<img alt='memory over time' src='data:image/png;base64,"
                     + base64.b64encode(png).decode() + "'>")
    else:
        parts.append("<p>(no plot: matplotlib is not installed)</p>")
    for s in summaries:
        parts.append(f"<h2>{e(heading(s))}</h2>")
        if "command" in s.run.tags:
            parts.append(f"<p>Command: <code>{e(str(s.run.tags['command']))}</code></p>")
        if s.metrics:
            parts.append("<table>")
            parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in HEADER) + "</tr>")
            for m, row in zip(s.metrics, rows(s)):
                cls = " class='leak'" if m.leak else ""
                parts.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
            parts.append("</table>")
        for note in s.notes:
            parts.append(f"<p class='note'>note: {e(note)}</p>")
        if s.suspects:
            parts.append(f"<h3>{e(s.suspects_title)}</h3><ul>")
            parts += [f"<li><code>{e(site)}</code> {e(detail)}</li>" for site, detail in s.suspects]
            parts.append("</ul>")
        if s.captured:
            parts.append("<h3>captured when the leak alarm fired</h3><ul>")
            parts += [f"<li><code>{e(site)}</code> {e(detail)}</li>" for site, detail in s.captured]
            parts.append("</ul>")
        title, stacks = kept_stacks(s)
        if stacks:
            parts.append(f"<h3>{e(title)} (user frame on top)</h3>")
            parts.append(flame_graph(stacks))
        elif title:
            parts.append(f"<p class='note flame-none'>{e(title)}</p>")
        if s.holders:
            parts.append("<h3>held by (referrer chains walked when the leak alarm fired)</h3><ul>")
            parts += [f"<li><code>{e(chain)}</code></li>" for chain in s.holders]
            parts.append("</ul>")
        if s.phases:
            parts.append("<h3>growth per phase</h3><table class='phases'>")
            parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in phase_header(s)) + "</tr>")
            for row in phase_rows(s):
                parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
            parts.append("</table>")
        for h in s.hints:
            parts.append(f"<p class='hint'>hint: {e(h)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
