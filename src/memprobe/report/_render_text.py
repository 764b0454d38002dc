"""Run summaries as terminal text: one section per process, then the totals.

Everything that came from a file goes through :func:`memprobe._format.safe`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._format import safe
from ._runs import RunSummary, fmt, verdict_text

HEADER = ["metric", "start", "end", "peak", "growth", "verdict"]


def table(rows: list[list[str]], left: int = 1) -> str:
    """Rows as aligned columns under a rule; the first ``left`` columns left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(w) if i < left else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if j == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def rows(summary: RunSummary) -> list[list[str]]:
    """The metric table's rows (no header), cells safe to print."""
    return [[safe(m.short), fmt(m.start, m.unit), fmt(m.end, m.unit), fmt(m.peak, m.unit),
             fmt(m.growth, m.unit, True), verdict_text(m)] for m in summary.metrics]


def phase_header(summary: RunSummary) -> list[str]:
    """The header of the growth-per-phase table."""
    return ["phase", "spans", "seconds", *(m.short for m in summary.phase_metrics)]


def phase_rows(summary: RunSummary) -> list[list[str]]:
    """The growth-per-phase table's rows (no header), cells safe to print; the time
    outside every span is ``(outside)``."""
    out = []
    for g in summary.phases:
        growth = g.growth or {}
        out.append([safe(g.label) if g.label else "(outside)",
                    str(g.spans) if g.label else "-", f"{g.seconds:.1f}",
                    *(fmt(growth[m.key], m.unit, True) if m.key in growth else "-"
                      for m in summary.phase_metrics)])
    return out


def heading(summary: RunSummary) -> str:
    """``pid 12 (role=main) leaky.py: 46 samples over 1.3 s (run.jsonl)``, safe to print."""
    run = summary.run
    cmd = f" {safe(run.tags['command'])}" if "command" in run.tags else ""
    files = ", ".join(safe(f) for f in run.files)
    return (f"{safe(run.label)}{cmd}: {len(run.samples)} samples over "
            f"{run.span_seconds:.1f} s ({files})")


def totals(summaries: Sequence[RunSummary]) -> str:
    """``2 process(es), 1 leaking metric(s)``."""
    return (f"{len(summaries)} process(es), "
            f"{sum(s.n_leaks for s in summaries)} leaking metric(s)")


def section(summary: RunSummary) -> str:
    """The text section of one run."""
    lines = [f"== {heading(summary)}"]
    if summary.metrics:
        lines.append(table([HEADER, *rows(summary)]))
    lines += [f"  note: {safe(n)}" for n in summary.notes]
    if summary.suspects:
        lines.append(f"  {summary.suspects_title}:")
        lines += [f"    {safe(site)}  {safe(detail)}" for site, detail in summary.suspects]
    if summary.captured:
        lines.append("  captured when the leak alarm fired:")
        lines += [f"    {safe(site)}  {safe(detail)}" for site, detail in summary.captured]
    if summary.holders:
        lines.append("  held by (referrer chains walked when the leak alarm fired):")
        lines += [f"    {safe(chain, 600)}" for chain in summary.holders]
    if summary.phases:
        lines.append("  growth per phase:")
        lines.append(table([phase_header(summary), *phase_rows(summary)]))
    lines += [f"  hint: {h}" for h in summary.hints]
    return "\n".join(lines)


def render(summaries: Sequence[RunSummary]) -> str:
    """The whole text report."""
    return "".join(section(s) + "\n\n" for s in summaries) + totals(summaries) + "\n"
