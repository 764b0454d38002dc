"""The Grafana dashboard that ships with memprobe (``memprobe grafana-dashboard``
writes it).

The dashboard reads the series :class:`memprobe_ray.RayMetricsSink` exports
(Ray prefixes each name with ``ray_``). Its template variables: ``datasource``
(a Prometheus data source), ``window`` (the range of ``rate``/``deriv``,
default 10m) and ``k`` (how many processes the top-k panel shows, default 5).
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any

#: The package data file holding the dashboard.
RESOURCE = "grafana_dashboard.json"
#: Defaults of the template variables the queries use besides the data source.
VARIABLES = {"window": "10m", "k": "5"}


def dashboard_json() -> dict[str, Any]:
    """The dashboard as a dict (a fresh copy)."""
    text = resources.files("memprobe_ray").joinpath(RESOURCE).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def queries(dashboard: dict[str, Any] | None = None,
            variables: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every query, with ``$window`` and ``$k`` filled in."""
    values = {**VARIABLES, **(variables or {})}
    out = []
    for panel in (dashboard or dashboard_json())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in values.items():
                expr = expr.replace("$" + name, value)
            out.append((panel["title"], expr))
    return out


def write_dashboard(out: Any = None) -> None:
    """Write the dashboard's JSON to ``out`` (a text file; default stdout)."""
    stream = sys.stdout if out is None else out
    json.dump(dashboard_json(), stream, indent=2)
    stream.write("\n")

