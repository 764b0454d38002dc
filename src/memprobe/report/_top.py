"""What ``memprobe top`` shows: one row per process, fed line by line as its JSONL grows.

A :class:`Board` keeps, per process (pid and tags, as ``memprobe report`` tells
them apart), the last :data:`WINDOW` samples only, so its memory is bounded
whatever runs for how long. At each refresh the processes that got samples are
judged again on that window (:func:`memprobe.analyze_samples`): the verdict, the
culprit it names (a tracemalloc site or an object type, with those probes),
the growth rate of rss (a least-squares slope over the window, bytes per
second) and a sparkline of rss. Rows are sorted by growth rate, fastest first.

The verdict is what costs (some 10 ms a process with tracemalloc sites: 0.5 s
of CPU for 50 processes), so a process is judged again at most every
:data:`JUDGE_SECONDS`, and a refresh spends at most :data:`JUDGE_BUDGET_SECONDS`
of CPU on verdicts (the oldest first; the rest at the next refreshes). Its rss,
rate and sparkline follow every refresh.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import keys
from .._format import fmt_value
from .._sample import Sample
from ..leak._verdicts import STATUS_WORDS, analyze_samples
from ._jsonl import parse_line

__all__ = ["WINDOW", "Board", "Row", "sparkline"]

#: Samples kept and judged per process.
WINDOW = 240
#: Seconds between two verdicts on one process.
JUDGE_SECONDS = 5.0
#: CPU seconds a refresh spends on verdicts (at least one verdict is given).
JUDGE_BUDGET_SECONDS = 0.15
#: Points of the rss sparkline.
SPARK_POINTS = 24
_BARS = "▁▂▃▄▅▆▇█"
#: The least span of the sparkline's scale, as a share of the largest value: a process
#: whose memory moves by less than this stays in the lowest bars rather than having its
#: noise drawn at full height (one bar is 1/8 of it, 1.25% of the level).
SPARK_MIN_SPAN_SHARE = 0.1


def sparkline(values: Iterable[float]) -> str:
    """``▁▂▄█``: each value's height above the smallest, on a scale spanning the largest
    minus the smallest, or :data:`SPARK_MIN_SPAN_SHARE` of the largest if that is more."""
    vs = list(values)
    if not vs:
        return ""
    lo, hi = min(vs), max(vs)
    span = max(hi - lo, SPARK_MIN_SPAN_SHARE * abs(hi))
    if not span > 0:
        return _BARS[0] * len(vs)
    return "".join(_BARS[min(7, int((v - lo) / span * 8))] for v in vs)


@dataclass
class Row:
    """One process: its last samples and what they say now."""

    pid: int
    tags: dict[str, Any]
    node: str = ""
    prefix: str | None = None
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=WINDOW))
    last_time: float = float("-inf")
    changed: bool = True
    judged_at: float = float("-inf")
    rss_bytes: float | None = None
    rate_bytes_per_second: float = 0.0
    verdict: str = "-"
    culprit: str = ""

    @property
    def process(self) -> str:
        """``actor Hoarder[3]``, ``env_runner[2]``, ``main leak.py``: role, name (or the
        script ``memprobe run`` ran), index."""
        t = self.tags
        role = str(t.get("role", "process"))
        name = t.get("name") or os.path.basename(str(t.get("command") or ""))
        index = t.get("index")
        if index in (None, "") and role in t:
            index = t[role]  # memprobe_rllib: {"role": "env_runner", "env_runner": 2}
        text = role + (f" {name}" if name else "")
        return text + (f"[{index}]" if index not in (None, "") else "")

    def judge(self, now: float, verdict: bool = True) -> None:
        """Growth rate from the window when it changed; with ``verdict``, the verdict
        and culprit too when the last is :data:`JUDGE_SECONDS` old (``now``: monotonic
        seconds)."""
        if not self.changed or not self.samples:
            return
        self.changed = False
        if self.prefix is None:
            self.prefix = keys.infer_prefix(self.samples[-1].values)
        prefix = self.prefix if self.prefix is not None else keys.DEFAULT_PREFIX
        rss_key = keys.make_key(prefix, "process", "rss_bytes")
        points = [(s.time_seconds, float(s.values[rss_key]))
                  for s in self.samples if rss_key in s.values]
        self.rss_bytes = points[-1][1] if points else None
        ts = [p[0] for p in points]
        self.rate_bytes_per_second = 0.0
        if len(set(ts)) >= 2:
            self.rate_bytes_per_second = statistics.linear_regression(
                ts, [p[1] for p in points]).slope
        if not verdict or now - self.judged_at < JUDGE_SECONDS:
            self.changed = True  # judged at a later refresh
            return
        self.judged_at = now
        try:
            report = analyze_samples(list(self.samples), prefix=prefix)
        except Exception as exc:  # a hostile file shows as such, never stops the view
            self.verdict, self.culprit = f"error: {type(exc).__name__}", ""
            return
        leaking = report.leaking_metrics
        if leaking:
            self.verdict = "LEAK " + ",".join(keys.split_short(m)[1] for m in leaking[:2])
        else:
            v = report.verdicts.get(rss_key)
            self.verdict = STATUS_WORDS.get(v.status, v.status) if v is not None else "-"
        culprits = report.culprits
        self.culprit = culprits[0] if culprits else ""

    def cells(self) -> list[str]:
        """The row as the table shows it."""
        rss = fmt_value(self.rss_bytes, "bytes") if self.rss_bytes is not None else "-"
        rate = fmt_value(self.rate_bytes_per_second, "bytes", True) + "/s"
        spark = sparkline(list(_rss_values(self))[-SPARK_POINTS:])
        return [self.process, self.node[:8], str(self.pid), rss, rate, self.verdict,
                self.culprit, spark]


def _rss_values(row: Row) -> Iterable[float]:
    prefix = row.prefix if row.prefix is not None else keys.DEFAULT_PREFIX
    key = keys.make_key(prefix, "process", "rss_bytes")
    return (float(s.values[key]) for s in row.samples if key in s.values)


#: The table's column titles.
COLUMNS = ["process", "node", "pid", "rss", "growth", "verdict", "culprit", "rss history"]


class Board:
    """Every process seen, fed one line at a time."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.bad_lines = 0
        self.lines = 0

    def feed(self, line: bytes, node: str = "") -> None:
        """One JSONL line; a bad line is counted, a sample already seen is skipped."""
        if not line.strip():
            return
        self.lines += 1
        try:
            sample, tags = parse_line(line.removesuffix(b"\r"))
        except Exception:  # RecursionError and MemoryError from hostile lines too
            self.bad_lines += 1
            return
        key = json.dumps([sample.pid, tags], sort_keys=True, default=str)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = Row(sample.pid, tags, str(tags.get("node") or node))
        if sample.time_seconds <= row.last_time:
            return  # read again (a rotated file, a Ray tail that overlaps the last one)
        row.last_time = sample.time_seconds
        row.samples.append(sample)
        row.changed = True

    def refresh(self, now: float | None = None) -> list[Row]:
        """Judge the processes that changed; every row, fastest-growing first."""
        now = time.monotonic() if now is None else now
        end = time.process_time() + JUDGE_BUDGET_SECONDS
        first = True
        for row in sorted(self.rows.values(), key=lambda r: r.judged_at):
            row.judge(now, first or time.process_time() < end)
            first = False
        return sorted(self.rows.values(), key=lambda r: -r.rate_bytes_per_second)
