"""The ``memprobe`` command: ``run`` a program under probing, ``report`` on it, list ``probes``.

Errors are one line on stderr, ``memprobe: error: ...``, with exit status 2.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import os
import re
import runpy
import statistics
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigError, MemprobeError
from ._verdicts import DEFAULT_METRICS
from .keys import short_key, site_name

PROG = "memprobe"

#: Whole-process metrics the report summarizes, in this order, when present:
#: the ones the leak verdicts judge.
MAIN_METRICS = DEFAULT_METRICS
#: Metrics drawn by ``--plot``, one panel each, when present. traced_bytes only
#: for files written before filtered_bytes existed (it is the one judged).
PLOT_METRICS = ("process/rss_bytes", "tracemalloc/filtered_bytes", "tracemalloc/traced_bytes",
                "process/num_fds", "objects/total_count")


class CliError(MemprobeError):
    """A command-line error: printed as one line, exit status 2."""


# -- argument parsing ----------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Memory probes for Python programs: run, report, list probes."
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    r = sub.add_parser(
        "run",
        help="run a Python program under probing, writing JSONL",
        description="Run script.py (or -m module) in this interpreter, sampling memory on a "
        "background thread every --interval seconds and once at exit. The program's "
        "stdout, stderr and exit status are its own.",
    )
    r.add_argument("--probes", default="process,gc",
                   help="comma-separated probe names (default: process,gc); "
                   "see `memprobe probes`")
    r.add_argument("--interval", type=float, default=0.1, metavar="SECONDS",
                   help="seconds between samples (default: 0.1)")
    r.add_argument("-o", "--output", default="memprobe.jsonl", metavar="PATH",
                   help="JSONL file to write, overwritten (default: memprobe.jsonl)")
    r.add_argument("-q", "--quiet", action="store_true",
                   help="do not print where the samples went")
    r.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    r.add_argument("args", nargs=argparse.REMAINDER, metavar="script.py [args]",
                   help="the program and its arguments")

    rep = sub.add_parser(
        "report",
        help="summarize JSONL runs: growth, leak verdicts, suspect sites",
        description="Summarize one or more JSONL files (from memprobe run, a Prober's sink or "
        "the RLlib adapter) per process: start/end/peak/growth, leak verdicts, top suspects.",
    )
    rep.add_argument("files", nargs="+", metavar="run.jsonl")
    rep.add_argument("--plot", metavar="OUT.png", help="draw memory over time (needs matplotlib)")
    rep.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page")

    pr = sub.add_parser("probes", help="list installed probes, their metrics and measured cost",
                        description="List the installed probes (built-in and entry points) "
                        "with their metric keys, units and cost per sample on this machine.")
    pr.add_argument("--repeat", type=int, default=5, help="samples per probe to time (default 5)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memprobe`` command; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "report":
            return cmd_report(args)
        return cmd_probes(args)
    except (MemprobeError, OSError) as exc:
        msg = str(exc) if not isinstance(exc, OSError) else f"{exc.filename}: {exc.strerror}"
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2


# -- run -----------------------------------------------------------------------------------
def _probe_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError("--probes", "names no probe")
    return names


class _Sampler:
    """Samples a Prober on a daemon thread until stopped, then once more."""

    def __init__(self, prober: Any, interval: float) -> None:
        self.prober = prober
        self.interval = interval
        self.step = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memprobe-sampler", daemon=True)

    def _sample(self, force: bool = False) -> None:
        self.prober.sample(step=self.step, force=force)
        self.step += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self.prober.start()
        self._sample(force=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(force=True)
        self.prober.stop()


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def cmd_run(args: argparse.Namespace) -> int:
    from ._prober import Prober
    from ._sinks import JsonlSink

    if args.interval <= 0:
        raise ConfigError("--interval", f"must be > 0 seconds, got {args.interval!r}")
    prog_args = list(args.args)
    if prog_args[:1] == ["--"]:
        prog_args = prog_args[1:]
    if args.module is None:
        if not prog_args:
            raise CliError("run needs a script (memprobe run script.py) or -m module")
        script = prog_args[0]
        if not os.path.exists(script):
            raise CliError(f"{script}: no such file")
        target = script
    else:
        target = args.module
    names = _probe_names(args.probes)
    out = args.output
    parent = os.path.dirname(out)
    if parent:
        os.makedirs(parent, exist_ok=True)
    open(out, "w").close()  # a fresh run; fails here, clearly, if the path is not writable
    sink = JsonlSink(out, tags={"role": "main", "command": target})
    prober = Prober(probes=names, sink=sink, history=16)
    sampler = _Sampler(prober, args.interval)

    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    code = 0
    sampler.start()
    try:
        if args.module is None:
            sys.argv = prog_args
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.argv = [args.module, *prog_args]
            sys.path[0] = os.getcwd()
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException as exc:
        _print_program_traceback(exc)
        code = 1
    finally:
        sys.stdout.flush()
        sampler.stop()
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
    if not args.quiet:
        print(f"{PROG}: {sampler.step} samples of {','.join(names)} written to {out}; "
              f"see `memprobe report {out}`", file=sys.stderr)
    return code


def _print_program_traceback(exc: BaseException) -> None:
    """The traceback without memprobe's and runpy's own frames."""
    tb = exc.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>")
    ):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


# -- report --------------------------------------------------------------------------------
@dataclass
class ProcessRun:
    """The samples of one process (pid + tags), possibly from several files."""

    pid: int
    tags: dict[str, Any]
    files: list[str] = field(default_factory=list)
    samples: list[Any] = field(default_factory=list)

    @property
    def label(self) -> str:
        tags = ", ".join(f"{k}={v}" for k, v in self.tags.items() if k != "command")
        return f"pid {self.pid}" + (f" ({tags})" if tags else "")


@dataclass
class MetricSummary:
    key: str
    start: float
    end: float
    peak: float
    verdict: Any = None
    detected_at: tuple[float, float] | None = None  # (time, value) where the leak was first seen

    @property
    def growth(self) -> float:
        return self.end - self.start


def _progress(i: int, n: int, path: str) -> None:
    if n > 1:
        end = "\r" if sys.stderr.isatty() else "\n"
        print(f"{PROG}: reading {i}/{n} {path}", file=sys.stderr, end=end, flush=True)


def load_runs(files: Sequence[str]) -> list[ProcessRun]:
    """Read JSONL files into one ProcessRun per (pid, tags); bad lines warn on stderr."""
    from ._jsonl import JsonlReadError, iter_records

    for path in files:  # all paths checked before any reading
        if not os.path.exists(path):
            raise JsonlReadError(path, "no such file")
    runs: dict[str, ProcessRun] = {}
    for i, path in enumerate(files, start=1):
        _progress(i, len(files), path)
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
            print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    if len(files) > 1 and sys.stderr.isatty():
        print(file=sys.stderr)
    out = list(runs.values())
    for run in out:
        run.samples.sort(key=lambda s: s.time_seconds)
    return out


def _detection_point(xs: list[float], ys: list[float], ts: list[float], key: str) -> int | None:
    """Index of the first prefix (checked at up to 24 lengths) judged a leak."""
    from ._verdicts import analyze

    n = len(xs)
    checks = sorted({max(2, round(n * k / 24)) for k in range(1, 25)})
    for m in checks:
        if analyze(xs[:m], ys[:m], key=key, times=ts[:m]).status == "leak":
            return m - 1
    return None


def summarize(run: ProcessRun) -> tuple[list[MetricSummary], Any]:
    """Per-metric summaries (with verdicts) and the leaks Report of one process."""
    from ._verdicts import analyze_samples

    report = analyze_samples(run.samples)
    prefix = _prefix(run)
    out = []
    for short in MAIN_METRICS:
        key = f"{prefix}{short}"
        pts = [(i, s) for i, s in enumerate(run.samples) if key in s.values]
        if not pts:
            continue
        ys = [float(s.values[key]) for _, s in pts]
        ms = MetricSummary(key, ys[0], ys[-1], max(ys), report.verdicts.get(key))
        if ms.verdict is not None and ms.verdict.leak:
            xs = [float(s.step if s.step is not None else i) for i, s in pts]
            ts = [s.time_seconds for _, s in pts]
            j = _detection_point(xs, ys, ts, key)
            if j is not None:
                ms.detected_at = (ts[j], ys[j])
        out.append(ms)
    return out, report


def _short(key: str) -> str:
    """The key without its first component (the prefix as :func:`_prefix` guesses it)."""
    return short_key(key, key.partition("/")[0])


def _name(key: str) -> str:
    """The site or type of a ``<probe>/top/<name>/<stat>`` key, else the key without prefix."""
    short = _short(key)
    return site_name(short.partition("/")[2]) or short


def _prefix(run: ProcessRun) -> str:
    for s in run.samples:
        for k in s.values:
            head, sep, _ = k.partition("/")
            if sep:
                return str(head) + "/"
    return "memprobe/"


def _fmt(key: str, v: float, signed: bool = False) -> str:
    sign = "+" if signed and v > 0 else ""
    if key.endswith("_bytes"):
        a = abs(v)
        for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if a >= div:
                return f"{sign}{v / div:.1f} {unit}"
        return f"{sign}{v:.0f} B"
    if float(v).is_integer():
        return f"{sign}{int(v)}"
    return f"{sign}{v:.4g}"


def _verdict_text(ms: MetricSummary) -> str:
    v = ms.verdict
    if v is None:
        return "-"
    if v.status == "leak":
        rate = v.rate_per_hour
        s = "LEAK " + (f"{_fmt(ms.key, rate, True)}/h" if rate is not None
                       else f"{_fmt(ms.key, v.slope_per_step, True)}/step")
        return s
    return str(v.status)


def _top_sites(run: ProcessRun, report: Any, n: int = 5) -> list[tuple[str, str]]:
    """(site, detail) for the suspects: leaking sites/types first, else the biggest sites."""
    out: list[tuple[str, str]] = []
    for v in (*report.sites, *report.types):
        if v.leak and len(out) < n:
            out.append((_name(v.key), f"growing {_fmt(v.key, v.slope_per_step, True)}/step"))
    if out:
        return out
    last = run.samples[-1].values if run.samples else {}
    top = [(k, v) for k, v in last.items()
           if "/tracemalloc/top/" in k and k.endswith("/size_bytes")]
    top.sort(key=lambda kv: -kv[1])
    for k, v in top[:n]:
        out.append((_name(k), f"{_fmt('x_bytes', v)} live at the end"))
    return out


def _table(rows: list[list[str]], left: int = 1) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(w) if i < left else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if j == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


HEADER = ["metric", "start", "end", "peak", "growth", "verdict"]


def _rows(summaries: list[MetricSummary]) -> list[list[str]]:
    return [[_short(m.key), _fmt(m.key, m.start), _fmt(m.key, m.end), _fmt(m.key, m.peak),
             _fmt(m.key, m.growth, True), _verdict_text(m)] for m in summaries]


def cmd_report(args: argparse.Namespace) -> int:
    plt = _pyplot() if args.plot or args.html else None
    if args.plot and plt is None:
        raise CliError("--plot needs matplotlib: pip install 'memprobe[plot]'")
    runs = load_runs(args.files)
    if not any(r.samples for r in runs):
        raise CliError(f"no samples in {', '.join(args.files)}")
    results = []
    for run in runs:
        summaries, report = summarize(run)
        results.append((run, summaries, report))
        print(_text_section(run, summaries, report))
        print()
    n_leaks = sum(1 for _, s, _ in results for m in s if m.verdict is not None and m.verdict.leak)
    print(f"{len(runs)} process(es), {n_leaks} leaking metric(s)")
    png = None
    if plt is not None:
        png = _plot_png(plt, results)
        if args.plot:
            with open(args.plot, "wb") as f:
                f.write(png)
            print(f"plot written to {args.plot}", file=sys.stderr)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(_html(results, png, args.files))
        print(f"html written to {args.html}", file=sys.stderr)
    return 0


def _text_section(run: ProcessRun, summaries: list[MetricSummary], report: Any) -> str:
    s = run.samples
    span = s[-1].time_seconds - s[0].time_seconds if s else 0.0
    cmd = f" {run.tags['command']}" if "command" in run.tags else ""
    lines = [f"== {run.label}{cmd}: {len(s)} samples over {span:.1f} s ({', '.join(run.files)})"]
    if summaries:
        lines.append(_table([HEADER, *_rows(summaries)]))
    for m in summaries:
        if m.verdict is not None and m.verdict.leak and m.verdict.note:
            lines.append(f"  note: {m.verdict.note}")
    sites = _top_sites(run, report)
    if sites:
        leaking = any(v.leak for v in (*report.sites, *report.types))
        lines.append("  top suspects:" if leaking else "  largest allocation sites:")
        lines += [f"    {site}  {detail}" for site, detail in sites]
    return "\n".join(lines)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _plot_png(plt: Any, results: list[tuple[ProcessRun, list[MetricSummary], Any]]) -> bytes:
    t0 = min(r.samples[0].time_seconds for r, _, _ in results if r.samples)
    panels = [m for m in PLOT_METRICS
              if any(_short(ms.key) == m for _, sums, _ in results for ms in sums)]
    panels = panels or ["process/rss_bytes"]
    if "tracemalloc/filtered_bytes" in panels and "tracemalloc/traced_bytes" in panels:
        panels.remove("tracemalloc/traced_bytes")
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels) + 0.6),
                             sharex=True, squeeze=False)
    for ax, metric in zip(axes[:, 0], panels):
        mib = metric.endswith("_bytes")
        for run, sums, _ in results:
            key = _prefix(run) + metric
            pts = [(s.time_seconds - t0, s.values[key]) for s in run.samples if key in s.values]
            if not pts:
                continue
            xs = [t for t, _ in pts]
            ys = [y / 2**20 if mib else y for _, y in pts]
            ax.plot(xs, ys, label=run.label, linewidth=1.4)
            for ms in sums:
                if ms.key == key and ms.detected_at is not None:
                    t, y = ms.detected_at
                    y = y / 2**20 if mib else y
                    ax.plot([t - t0], [y], marker="v", markersize=11, color="red",
                            linestyle="none", zorder=5)
                    ax.annotate(f"leak: {_verdict_text(ms)[5:]}", (t - t0, y),
                                textcoords="offset points", xytext=(6, 8),
                                color="red", fontsize=9)
        ax.set_ylabel(metric.replace("_bytes", " (MiB)") if mib else metric)
        ax.grid(True, alpha=0.3)
        if len(results) <= 8:
            ax.legend(loc="upper left", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the first sample")
    fig.suptitle("memprobe: memory over time (red: leak detected)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _html(results: list[tuple[ProcessRun, list[MetricSummary], Any]], png: bytes | None,
          files: Sequence[str]) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>memprobe report</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
        "td{text-align:right}td:first-child{text-align:left}.leak{color:#c00;font-weight:bold}"
        "</style></head><body>",
        f"<h1>memprobe report</h1><p>{e(', '.join(files))}</p>",
    ]
    if png is not None:
        parts.append("<img alt='memory over time' src='data:image/png;base64,"
                     + base64.b64encode(png).decode() + "'>")
    else:
        parts.append("<p>(no plot: matplotlib is not installed)</p>")
    for run, sums, report in results:
        parts.append(f"<h2>{e(run.label)}</h2><p>{len(run.samples)} samples</p><table>")
        parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in HEADER) + "</tr>")
        for ms, row in zip(sums, _rows(sums)):
            cls = " class='leak'" if ms.verdict is not None and ms.verdict.leak else ""
            parts.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
        parts.append("</table>")
        sites = _top_sites(run, report)
        if sites:
            parts.append("<ul>" + "".join(f"<li><code>{e(s)}</code> {e(d)}</li>"
                                          for s, d in sites) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


# -- probes --------------------------------------------------------------------------------
def _unit(metric: str, desc: str = "") -> str:
    for word in ("bytes", "seconds", "count", "fraction"):
        if re.search(rf",\s*{word}\b", desc):
            return word
    for suffix, unit in (("_bytes", "bytes"), ("_seconds", "seconds"), ("count", "count"),
                         ("fraction", "fraction")):
        if metric.endswith(suffix):
            return unit
    return ""


def measure_cost(info: Any, repeat: int) -> tuple[float | None, str]:
    """Median seconds per ``sample()`` of a default-configured probe, or (None, error)."""
    try:
        probe = info.factory()
        probe.start()
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    try:
        probe.sample()  # warm up
        costs = []
        for _ in range(repeat):
            t = time.perf_counter()
            probe.sample()
            costs.append(time.perf_counter() - t)
        return statistics.median(costs), ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        try:
            probe.stop()
        except Exception:
            pass


def _fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def cmd_probes(args: argparse.Namespace) -> int:
    from ._plugins import collect_probes, get_plugin_manager

    if args.repeat < 1:
        raise ConfigError("--repeat", f"must be >= 1, got {args.repeat!r}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry = collect_probes(get_plugin_manager())
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    for name, info in registry.items():
        print(f"measuring {name}...", file=sys.stderr, flush=True)
        cost, err = measure_cost(info, args.repeat)
        cost_s = _fmt_seconds(cost) if cost is not None else f"n/a ({err})"
        print(f"{name}  (plugin {info.plugin}; {cost_s} per sample, measured here)")
        if info.doc:
            print(f"  {info.doc}")
        rows = [["key", "unit", "meaning"]]
        for metric, desc in info.metrics.items():
            rows.append([f"memprobe/{name}/{metric}", _unit(metric, desc), desc])
        if len(rows) > 1:
            print(_table(rows, left=3))
        print()
    return 0
