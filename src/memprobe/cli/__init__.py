"""The ``memprobe`` command: ``run`` a program under probing, ``report`` on it, watch it
live with ``top``, list ``probes``, write the ``grafana-dashboard`` for Ray clusters.

A thin layer: reading and summarizing runs is :mod:`memprobe.report._runs`, the
formats are ``_render_text``, ``_render_html`` and ``_render_png``, running a
program is :mod:`memprobe.cli._run`, safe outputs :mod:`memprobe.cli._outputs`.
Errors are one line on stderr, ``memprobe: error: ...``, with exit status 2.
Exit statuses (docs/cli.md, "Exit status"): 0 done; 2 usage or input error;
:data:`EXIT_LEAK` (3) when ``report --fail-on-leak`` found a leak; ``run``
exits with the program's own status.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigError, MemprobeError
from .._format import fmt_seconds, safe
from ._run import DEFAULT_RUN_BUDGET, PROG, CliError, cmd_run, say, split_argv

__all__ = ["EXIT_LEAK", "PROG", "CliError", "main"]

#: ``memprobe report --fail-on-leak``'s exit status when a metric of a process leaks:
#: distinct from 1 (a crash, or the reader of stdout left) and 2 (usage or input error).
EXIT_LEAK = 3

#: The most samples ``memprobe probes --repeat`` times per probe.
MAX_REPEAT = 10_000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Memory probes for Python programs: run, report, top, list probes."
    )
    from .._version import __version__

    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    r = sub.add_parser(
        "run",
        help="run a Python program under probing, writing JSONL",
        usage=f"{PROG} run [options] script.py [args] | -m module [args]",
        description="Run script.py (or -m module) in this interpreter, sampling memory on a "
        "background thread every --interval seconds and once at exit. The program's "
        "stdout, stderr and exit status are its own. Everything after the script or "
        "-m module is the program's.",
    )
    r.add_argument("--probes", default="process,gc",
                   help="comma-separated probe names (default: process,gc); "
                   "see `memprobe probes`")
    r.add_argument("--probe-option", action="append", metavar="PROBE.OPTION=VALUE",
                   help="an option of a probe in --probes, as Prober(probes={PROBE: "
                   "{OPTION: VALUE}}) takes it; VALUE is read as JSON, else as a string "
                   "(memray.native_traces=true, tracemalloc.nframe=16); repeatable")
    r.add_argument("--interval", type=float, default=0.1, metavar="SECONDS",
                   help="seconds between samples, 0.001 to 86400 (default: 0.1)")
    r.add_argument("--budget", type=float, default=DEFAULT_RUN_BUDGET, metavar="FRACTION",
                   help="the fraction of wall time sampling may take, in (0, 1]: after a "
                   "sample that took d seconds of CPU the next waits at least d/FRACTION - d "
                   f"(default: {DEFAULT_RUN_BUDGET}; 1: only --interval)")
    r.add_argument("-o", "--output", default="memprobe.jsonl", metavar="PATH",
                   help="JSONL file written (replaced at the end; default: memprobe.jsonl)")
    r.add_argument("-q", "--quiet", action="store_true",
                   help="do not print where the samples went")

    rep = sub.add_parser(
        "report",
        help="summarize JSONL runs: growth, leak verdicts, suspect sites",
        description="Summarize JSONL files (from memprobe run, a Prober's sink or the "
        "RLlib adapter; .jsonl.gz too) per process: start/end/peak/growth, leak verdicts, "
        "top suspects.",
    )
    rep.add_argument("files", nargs="*", metavar="run.jsonl")
    rep.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                     help="read every node's memprobe JSONL through Ray's state API "
                     "(ADDRESS: host:6379 or auto; default: the local cluster)")
    rep.add_argument("--max-file-mib", type=float, default=256, metavar="MIB",
                     help="with --ray, the MiB read of each file at most (default: 256)")
    rep.add_argument("--plot", metavar="OUT.png", help="draw memory over time (needs matplotlib)")
    rep.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page")
    rep.add_argument("--json", action="store_true",
                     help="print one JSON document (schema in docs/cli.md) instead of the text")
    rep.add_argument("--fail-on-leak", action="store_true",
                     help=f"exit with status {EXIT_LEAK} when a process leaks (for CI)")

    top = sub.add_parser(
        "top", help="a live table of every process from JSONL as it grows",
        description="Follow JSONL files (and directories of them, and memprobe run's output "
        "while it runs) and show every process: rss, growth rate, leak verdict and culprit, "
        "an rss sparkline; fastest-growing first, redrawn every --interval seconds until q. "
        "On a pipe, or with --once, one snapshot.")
    top.add_argument("paths", nargs="*", metavar="DIR|FILE")
    top.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                     help="follow every node's memprobe JSONL through Ray's state API")
    top.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                     help="seconds between refreshes, >= 0.2 (default: 2)")
    top.add_argument("--once", action="store_true", help="print one snapshot and exit")
    top.add_argument("--plain", action="store_true", help="plain text even where rich is "
                     "installed")

    pr = sub.add_parser("probes", help="list installed probes, their metrics and measured cost",
                        description="List the installed probes (built-in and entry points) "
                        "with their metric keys, units and cost per sample on this machine.")
    pr.add_argument("--repeat", type=int, default=5,
                    help=f"samples per probe to time, 1 to {MAX_REPEAT:,} (default 5)")

    g = sub.add_parser("grafana-dashboard",
                       help="write the Grafana dashboard for memprobe's Ray metrics (JSON)",
                       description="Write memprobe's Grafana dashboard (JSON) for the series "
                       "memprobe_ray exports through Ray's metrics; import it in Grafana "
                       "(Dashboards > New > Import) and pick the Prometheus that scrapes Ray.")
    g.add_argument("-o", "--output", metavar="FILE",
                   help="file to write (replaced whole; default: standard output)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memprobe`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    err = sys.stderr
    try:
        if argv[:1] == ["run"]:
            own, module, prog_args = split_argv(argv[1:])
            args = parser.parse_args(["run", *own])
            return cmd_run(args, module, prog_args)
        args = parser.parse_args(argv)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "top":
            from ._top_view import cmd_top

            return cmd_top(args)
        if args.command == "grafana-dashboard":
            return cmd_grafana_dashboard(args)
        return cmd_probes(args)
    except BrokenPipeError:  # `memprobe report ... | head`: the reader left; so do we
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (MemprobeError, OSError) as exc:
        if isinstance(exc, OSError) and exc.filename is not None:
            msg = f"{exc.filename}: {exc.strerror}"
        else:
            msg = str(exc)
        say(err, f"{PROG}: error: {safe(msg, 1000)}")
        return 2


# -- report --------------------------------------------------------------------------------
def _progress(i: int, n: int, path: str) -> None:
    if n > 1:
        end = "\r" if sys.stderr.isatty() else "\n"
        print(f"{PROG}: reading {i}/{n} {safe(path)}", file=sys.stderr, end=end, flush=True)


def cmd_report(args: argparse.Namespace) -> int:
    """``memprobe report``: the text report on stdout, optionally a PNG and an HTML page."""
    from .._registry import installed_declarations
    from ..report._render_html import render as render_html
    from ..report._render_png import pyplot
    from ..report._render_png import render as render_png
    from ..report._render_text import render as render_text
    from ..report._runs import load_runs, summarize_all
    from ._outputs import check_outputs, write_file

    if args.ray is not None:
        from ._ray import cmd_report_ray

        return cmd_report_ray(args, cmd_report)
    if not args.files:
        raise CliError("give the JSONL files to report on, or --ray")
    outputs = [(opt, path) for opt, path in (("--plot", args.plot), ("--html", args.html))
               if path]
    check_outputs(outputs, [("input", f) for f in args.files])
    plt = pyplot() if outputs else None
    if args.plot and plt is None:
        raise CliError("--plot needs matplotlib: pip install 'pymemprobe[plot]'")
    def warn(message: str) -> None:
        print(f"{PROG}: warning: {safe(message, 1000)}", file=sys.stderr)

    runs = load_runs(args.files, on_file=_progress, on_warning=warn)
    installed_declarations(on_warning=warn)  # the plugins load here: their faults shown, as by run
    if len(args.files) > 1 and sys.stderr.isatty():
        print(file=sys.stderr)
    summaries = summarize_all(runs)
    if not summaries:
        raise CliError(f"no samples in {', '.join(safe(f) for f in args.files)}")
    if args.json:
        from ..report._render_json import render as render_json

        _write_escaped(render_json(summaries, args.files))
    else:
        _write_escaped(render_text(summaries))
    png = render_png(plt, summaries) if plt is not None else None
    if args.plot and png is not None:
        write_file(args.plot, png)
        print(f"plot written to {safe(args.plot)}", file=sys.stderr)
    if args.html:
        write_file(args.html, render_html(summaries, png, args.files)
                   .encode("utf-8", "backslashreplace"))
        print(f"html written to {safe(args.html)}", file=sys.stderr)
    if args.fail_on_leak and any(s.n_leaks for s in summaries):
        return EXIT_LEAK
    return 0


def _write_escaped(text: str) -> None:
    """``text`` on stdout; what its encoding cannot write (a lone surrogate from a file
    name that is not UTF-8) is shown escaped (``\\udcff``) instead of failing."""
    out = sys.stdout
    errors = getattr(out, "errors", None)
    if errors is not None and hasattr(out, "reconfigure"):
        out.reconfigure(errors="backslashreplace")
    try:
        out.write(text)
        out.flush()
    finally:
        if errors is not None and hasattr(out, "reconfigure"):
            out.reconfigure(errors=errors)


# -- probes --------------------------------------------------------------------------------
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


def cmd_probes(args: argparse.Namespace) -> int:
    """``memprobe probes``: every installed probe, its metrics with units, its cost here."""
    from .. import keys
    from .._plugins import collect_probes, get_plugin_manager
    from ..metrics import as_metric
    from ..report._render_text import table

    if not 1 <= args.repeat <= MAX_REPEAT:
        raise ConfigError("--repeat", f"must be from 1 to {MAX_REPEAT:,}, got {args.repeat!r}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry = collect_probes(get_plugin_manager())
    for w in caught:
        print(f"{PROG}: warning: {safe(w.message, 1000)}", file=sys.stderr)
    for name, info in registry.items():
        print(f"measuring {safe(name)}...", file=sys.stderr, flush=True)
        cost, error = measure_cost(info, args.repeat)
        cost_s = fmt_seconds(cost) if cost is not None else f"n/a ({safe(error)})"
        print(f"{safe(name)}  (plugin {safe(info.plugin)}; {cost_s} per sample, measured here)")
        if info.doc:
            print(f"  {safe(info.doc)}")
        rows = [["key", "unit", "kind", "meaning"]]
        for metric, declared in (getattr(info.factory, "metrics", {}) or {}).items():
            m = as_metric(metric, declared)
            rows.append([safe(keys.pattern_key(keys.DEFAULT_PREFIX, name, metric)),
                         m.unit, m.kind, safe(m.description)])
        if len(rows) > 1:
            print(table(rows, left=4))
        print()
    return 0


# -- grafana-dashboard -----------------------------------------------------------------------
def cmd_grafana_dashboard(args: argparse.Namespace) -> int:
    """``memprobe grafana-dashboard [-o FILE]``: the dashboard's JSON on stdout or in FILE.

    The dashboard ships in :mod:`memprobe_ray` (importing it does not import Ray).
    """
    import json

    from ._outputs import check_outputs, write_file

    try:
        from memprobe_ray.dashboard import dashboard_json
    except ImportError as exc:
        raise CliError(f'grafana-dashboard needs memprobe_ray: pip install "pymemprobe[ray]" '
                       f"({exc})") from None
    text = json.dumps(dashboard_json(), indent=2) + "\n"
    if args.output:
        check_outputs([("--output", args.output)], [])
        write_file(args.output, text.encode("utf-8"))
        print(f"dashboard written to {safe(args.output)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0
