"""``memprobe report --ray [ADDRESS]``: every node's JSONL, through Ray's state API, into the
report that ``memprobe report FILES`` prints.

The files are copied by :func:`memprobe_ray.fetch_jsonl` into a temporary
directory (streamed to disk, cut at ``--max-file-mib`` each), read by the same
code as local files, and removed after the report. Nodes that could not be read
are listed on stderr; the report goes on with the others.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable

from .._format import safe
from ._run import PROG, CliError

__all__ = ["cmd_report_ray"]

#: The range ``--max-file-mib`` takes: from one KiB to one TiB a file.
MAX_FILE_MIB = (2.0**-10, 2.0**20)


def _warn(text: str) -> None:
    print(f"{PROG}: warning: {safe(text, 1000)}", file=sys.stderr)


def cmd_report_ray(args: argparse.Namespace,
                   report: Callable[[argparse.Namespace], int]) -> int:
    """Fetch every node's files, then ``report(args)`` with ``args.files`` set to them."""
    if args.files:
        raise CliError("--ray reads the cluster's files: give either --ray or files, not both")
    lo, hi = MAX_FILE_MIB
    if not (math.isfinite(args.max_file_mib) and lo <= args.max_file_mib <= hi):
        raise CliError(f"--max-file-mib must be a number of MiB from {lo:g} to {hi:g}, "
                       f"got {args.max_file_mib!r}")
    try:
        import memprobe_ray.logs as ray_logs
        import ray  # noqa: F401  (the state API below needs it)
    except ImportError as exc:
        raise CliError(f'--ray needs Ray: pip install "pymemprobe[ray]" ({exc})') from None
    address = args.ray or None
    tty = sys.stderr.isatty()

    def progress(i: int, n: int, what: str) -> None:
        print(f"{PROG}: fetching {i}/{n} {safe(what)}", file=sys.stderr,
              end="\r" if tty else "\n", flush=True)

    with tempfile.TemporaryDirectory(prefix="memprobe-ray-") as tmp:
        try:
            fetched = ray_logs.fetch_jsonl(
                tmp, address, max_file_bytes=int(args.max_file_mib * 2**20), on_file=progress)
        except ConnectionError as exc:
            raise CliError(str(exc)) from None
        if fetched.files and tty:
            print(file=sys.stderr)
        for node_id, why in fetched.unreachable:
            _warn(f"node {node_id} not read: {why}")
        for f in fetched.files:
            if f.cut:
                _warn(f"{f.node_id}/{f.name}: read its first {args.max_file_mib:g} MiB only "
                      "(--max-file-mib)")
        if not fetched.files:
            raise CliError(f"no memprobe JSONL on any node of {address or 'the cluster'} "
                           f"(looked for {ray_logs.LOG_FOLDER}/**/*.jsonl* in each "
                           "node's session log directory)")
        print(f"{PROG}: {len(fetched.files)} files from "
              f"{len({f.node_id for f in fetched.files})} nodes", file=sys.stderr)
        args.files = [f.path for f in fetched.files]
        args.ray = None
        return report(args)
