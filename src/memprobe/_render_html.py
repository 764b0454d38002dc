"""Run summaries as one self-contained HTML page: what the text report shows, plus the plot."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from ._render_text import HEADER, heading, phase_header, phase_rows, rows, totals
from ._runs import RunSummary

_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px}"
    "td{text-align:right}td:first-child{text-align:left}"
    ".leak{color:#c00;font-weight:bold}.hint{color:#555}"
    "img{max-width:100%}"
)


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
