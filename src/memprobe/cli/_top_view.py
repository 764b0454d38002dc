"""``memprobe top``: the live table of the report's board, on a terminal or as one snapshot.

On a terminal the table is drawn again every ``--interval`` seconds until ``q``
(or Ctrl-C), with `rich <https://github.com/Textualize/rich>`_ when it is
installed (``pip install "pymemprobe[top]"``), else as plain text. When stdout
is not a terminal (a pipe, a file), or with ``--once``, one snapshot is
printed and the command exits.

Local files are followed by :class:`memprobe.report._tail.Folder`: each refresh reads
what was appended since the last one. With ``--ray`` each refresh reads the last
lines of every node's files through Ray's state API (:func:`memprobe_ray.read_tails`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import select
import sys
import time
from collections.abc import Iterator
from typing import Any

from .._format import safe
from ..report._tail import Folder
from ..report._top import COLUMNS, WINDOW, Board, Row
from ._run import PROG, CliError

__all__ = ["cmd_top"]

#: Bytes of a file read at one refresh at most (the rest at the next ones).
READ_BYTES = 8 * 2**20
#: Bytes from the end of a file met for the first time (older samples are not shown).
BACKLOG_BYTES = 4 * 2**20
#: The range ``--interval`` takes, in seconds (a day at most: select() takes no more).
INTERVAL_SECONDS = (0.2, 86400.0)


class _Local:
    def __init__(self, paths: list[str]) -> None:
        self.folder = Folder(paths)
        self.files = 0
        self.problems: list[str] = []

    def poll(self, board: Board) -> None:
        tails = self.folder.scan()
        self.files = len(tails)
        self.problems = list(self.folder.problems)
        for tail in tails:
            for line in tail.read(READ_BYTES, BACKLOG_BYTES):
                board.feed(line)


class _Ray:
    def __init__(self, address: str | None) -> None:
        try:
            import memprobe_ray.logs as ray_logs
        except ImportError as exc:
            raise CliError(f'--ray needs Ray: pip install "pymemprobe[ray]" ({exc})') from None
        self.read_tails = ray_logs.read_tails
        self.address = address
        self.files = 0
        self.problems: list[str] = []
        self.lines = WINDOW

    def poll(self, board: Board) -> None:
        try:
            tails = self.read_tails(self.address, lines=self.lines)
        except ConnectionError as exc:
            self.problems = [str(exc)]
            return
        self.files = len(tails.files)
        self.problems = [f"node {n} not read: {why}" for n, why in tails.unreachable]
        for node, _name, data in tails.files:
            for line in data.splitlines():
                board.feed(line, node)
        self.lines = max(20, WINDOW // 4)  # then only the lines since (duplicates skipped)


def _counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 file``, ``2 files``."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _header(board: Board, source: Any, interval: float, live: bool) -> str:
    when = time.strftime("%H:%M:%S")
    text = (f"{PROG} top: {_counted(len(board.rows), 'process', 'processes')} in "
            f"{_counted(source.files, 'file')}, {when}"
            + (f", every {interval:g} s; q quits" if live else ""))
    if board.bad_lines:
        text += f"; {board.bad_lines} bad lines skipped"
    return "\n".join([text, *(f"  {safe(p, 300)}" for p in source.problems)])


#: Columns aligned right.
_RIGHT = {"pid", "rss", "growth"}


def _plain(rows: list[Row]) -> str:
    """The table as text: numbers aligned right, a rule under the titles."""
    cells = [COLUMNS, *([safe(c, 80) for c in r.cells()] for r in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = []
    for j, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if COLUMNS[i] in _RIGHT else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _rich(rows: list[Row], header: str) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(box=None, header_style="bold", pad_edge=False)
    for c in COLUMNS:
        t.add_column(c, justify="right" if c in ("pid", "rss", "growth") else "left",
                     no_wrap=c != "culprit", overflow="ellipsis")
    for r in rows:
        cells = [Text(safe(c, 80)) for c in r.cells()]
        if r.verdict.startswith("LEAK"):
            cells[5].stylize("bold red")
        t.add_row(*cells)
    return Group(Text(header), t)


@contextlib.contextmanager
def _keys() -> Iterator[Any]:
    """stdin in cbreak mode (keys without Enter, no echo), restored on the way out."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_within(fd: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for a key; True for ``q``."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            key = os.read(fd, 32)
            if not key or b"q" in key.lower():
                return True
    return False


def cmd_top(args: argparse.Namespace) -> int:
    """``memprobe top``: a live table of every process, or one snapshot on a pipe."""
    lo, hi = INTERVAL_SECONDS
    if not (math.isfinite(args.interval) and lo <= args.interval <= hi):
        raise CliError(f"--interval must be a number of seconds from {lo:g} to {hi:g}, "
                       f"got {args.interval!r}")
    if args.ray is not None:
        if args.paths:
            raise CliError("give either --ray or files and directories, not both")
        source: Any = _Ray(args.ray or None)
    else:
        if not args.paths:
            raise CliError("give the JSONL files or directories to watch, or --ray")
        source = _Local(list(args.paths))
    board = Board()
    live = not args.once and sys.stdout.isatty() and sys.stdin.isatty()
    if not live:
        source.poll(board)
        rows = board.refresh()
        sys.stdout.write(_header(board, source, args.interval, False) + "\n"
                         + _plain(rows) + "\n")
        sys.stdout.flush()
        return 0
    try:
        import rich  # noqa: F401
        use_rich = not args.plain
    except ImportError:
        use_rich = False
    try:
        with _keys() as fd:
            return _loop(fd, source, board, args.interval, use_rich)
    except KeyboardInterrupt:  # Ctrl-C quits as q does
        return 0


def _loop(fd: int, source: Any, board: Board, interval: float, use_rich: bool) -> int:
    if use_rich:
        from rich.live import Live

        with Live(auto_refresh=False, screen=True, redirect_stderr=False) as view:
            while True:
                source.poll(board)
                rows = board.refresh()
                view.update(_rich(rows, _header(board, source, interval, True)), refresh=True)
                if _quit_within(fd, interval):
                    return 0
    while True:
        source.poll(board)
        rows = board.refresh()
        sys.stdout.write("\x1b[H\x1b[2J" + _header(board, source, interval, True)
                         + "\n" + _plain(rows) + "\n")
        sys.stdout.flush()
        if _quit_within(fd, interval):
            return 0
