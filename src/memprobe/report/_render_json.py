"""Run summaries as one JSON document, for machines: ``memprobe report --json``.

The schema is :data:`SCHEMA_VERSION` and is documented in docs/cli.md
("JSON output"); a field is added without a new version, a field renamed,
removed or changed in meaning takes the next. Non-finite numbers (which JSON
cannot hold) are ``null``. Text that came from a file is JSON-escaped
(``ensure_ascii``), so printing the document cannot reach the terminal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from ..leak._verdicts import STATUS_WORDS
from ._runs import MetricSummary, RunSummary, site_of

#: The version of the document's schema (its ``schema_version`` field).
SCHEMA_VERSION = 1


def _num(v: Any) -> float | int | None:
    if v is None:
        return None
    v = float(v)
    if not math.isfinite(v):
        return None
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def _metric(m: MetricSummary) -> dict[str, Any]:
    v = m.verdict
    out: dict[str, Any] = {
        "metric": m.short, "key": m.key, "unit": m.unit,
        "start": _num(m.start), "end": _num(m.end), "peak": _num(m.peak),
        "growth": _num(m.growth),
        "status": v.status if v is not None else None,
        "words": STATUS_WORDS.get(v.status, v.status) if v is not None else None,
        "leak": m.leak,
    }
    if v is not None:
        out.update({
            "describe": v.describe(),
            "slope_per_step": _num(v.slope_per_step), "slope_low": _num(v.slope_low),
            "slope_high": _num(v.slope_high), "step": v.step,
            "rate_per_hour": _num(v.rate_per_hour), "n_points": v.n_points,
            "warmup_points": v.warmup_points, "kind": v.kind, "note": v.note,
            "culprits": list(v.culprits),
        })
    return out


def process(summary: RunSummary) -> dict[str, Any]:
    """The JSON object of one process."""
    run = summary.run
    report = summary.report
    sites = [
        {"site": site_of(v.key, run.prefix), "key": v.key, "status": v.status,
         "slope_per_step": _num(v.slope_per_step), "rate_per_hour": _num(v.rate_per_hour)}
        for v in (*report.sites, *report.types) if v.status == "leak"
    ]
    return {
        "label": run.label,
        "pid": run.pid,
        "tags": {str(k): (v if isinstance(v, (str, int, float, bool)) or v is None else str(v))
                 for k, v in run.tags.items()},
        "files": list(run.files),
        "prefix": run.prefix,
        "samples": len(run.samples),
        "span_seconds": _num(run.span_seconds),
        "leak": summary.n_leaks > 0,
        "leaking_metrics": [m.short for m in summary.metrics if m.leak],
        "kind": report.kind,
        "culprits": list(report.culprits),
        "metrics": [_metric(m) for m in summary.metrics],
        "leaking_sites": sites,
        "suspects_title": summary.suspects_title,
        "suspects": [{"site": s, "detail": d} for s, d in summary.suspects],
        "notes": list(summary.notes),
        "hints": list(summary.hints),
    }


def document(summaries: Sequence[RunSummary], files: Sequence[str]) -> dict[str, Any]:
    """The whole report as a JSON-ready dict."""
    from .._version import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "memprobe_version": __version__,
        "files": list(files),
        "leak": any(s.n_leaks for s in summaries),
        "processes": [process(s) for s in summaries],
    }


def render(summaries: Sequence[RunSummary], files: Sequence[str]) -> str:
    """The JSON document, one line, newline-terminated."""
    return json.dumps(document(summaries, files), ensure_ascii=True, allow_nan=False,
                      separators=(",", ":"), default=str) + "\n"
