"""Following JSONL files as they grow: each read returns the lines appended since the last.

A :class:`Tail` keeps, per file, the device and inode it read and the offset it
reached; each :meth:`Tail.read` reads from there in chunks of :data:`CHUNK_BYTES`
and hands out complete lines, so memory stays within a chunk plus one partial
line (at most :data:`memprobe.report._jsonl.MAX_LINE_BYTES`; a longer line is dropped),
however large the file. A :class:`Folder` finds the files to follow at each
refresh, so files may appear, be rotated (a new inode, or a file shorter than
the offset: read again from its start) or vanish (dropped, no error).

``memprobe run`` writes its output beside the final name (``.run.jsonl.<random>.tmp``)
and renames it at the end: a Folder follows such files, and keeps its place in a
file that is renamed (same inode) rather than reading it again.

A directory is walked with each real directory visited once (a symlink to a
directory already seen, such as ``a -> .``, is not entered again) and at most
:data:`MAX_DIRS` directories a scan, so a symlink loop or a link to ``/`` costs
a bounded walk, said in :attr:`Folder.problems`.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ._jsonl import MAX_LINE_BYTES

__all__ = ["CHUNK_BYTES", "Folder", "Tail"]

#: Bytes read at once.
CHUNK_BYTES = 2**20
#: What a folder follows: JSONL files, and ``memprobe run``'s output while it runs.
PATTERNS = ("*.jsonl", ".*.jsonl.*.tmp")
#: Directories one scan walks at most (each real directory once).
MAX_DIRS = 2000


@dataclass
class Tail:
    """One file followed from the offset reached."""

    path: str
    dev: int = -1
    ino: int = -1
    offset: int = 0
    partial: bytes = b""
    #: The partial line is over the cap: its bytes are dropped up to its newline.
    skipping: bool = False

    def read(self, max_bytes: int | None = None,
             backlog_bytes: int | None = None) -> Iterator[bytes]:
        """The complete lines appended since the last read (without newlines).

        At most ``max_bytes`` are read this time (the rest at the next read).
        A vanished file yields nothing; a rotated one is read again. A file met
        for the first time (or rotated) is read from ``backlog_bytes`` before its
        end when it is longer (its first, partial line there dropped).
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return
            if (st.st_dev, st.st_ino) != (self.dev, self.ino) or st.st_size < self.offset:
                self.dev, self.ino = st.st_dev, st.st_ino
                self.offset, self.partial, self.skipping = 0, b"", False
                if backlog_bytes is not None and st.st_size > backlog_bytes:
                    self.offset, self.skipping = st.st_size - backlog_bytes, True
            budget = st.st_size - self.offset
            if max_bytes is not None:
                budget = min(budget, max_bytes)
            while budget > 0:
                chunk = os.pread(fd, min(CHUNK_BYTES, budget), self.offset)
                if not chunk:
                    break
                self.offset += len(chunk)
                budget -= len(chunk)
                yield from self._lines(chunk)
        finally:
            os.close(fd)

    def _lines(self, chunk: bytes) -> Iterator[bytes]:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self.skipping:
                self.skipping = False
            elif len(self.partial) + end - start > MAX_LINE_BYTES:
                self.partial = b""  # over the cap: dropped, as the file reader does
            else:
                line = self.partial + chunk[start:end] if self.partial else chunk[start:end]
                self.partial = b""
                yield line
            start = end + 1
        rest = chunk[start:]
        if self.skipping or not rest:
            return
        if len(self.partial) + len(rest) > MAX_LINE_BYTES:
            self.partial, self.skipping = b"", True
        else:
            self.partial += rest


class Folder:
    """The files to follow: the JSONL files under some directories, and some files.

    Each :meth:`scan` looks again, so files that appear are followed and files
    that vanish are dropped; a file given by name is also followed through
    ``memprobe run``'s temporary output beside it.
    """

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = [os.fspath(p) for p in paths]
        self.tails: dict[str, Tail] = {}
        #: What the last scan could not do (a walk cut at :data:`MAX_DIRS`).
        self.problems: list[str] = []

    def _walk(self, top: str, seen: set[tuple[int, int]], found: list[str]) -> None:
        """The followed files under ``top``, as ``glob``'s ``**`` finds them (hidden
        directories skipped), entering each real directory once."""
        stack = [top]
        while stack:
            d = stack.pop()
            try:
                st = os.stat(d)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            if len(seen) >= MAX_DIRS:
                self.problems.append(f"{top}: stopped after {MAX_DIRS} directories")
                return
            seen.add((st.st_dev, st.st_ino))
            try:
                with os.scandir(d) as entries:
                    names = [(e.name, e.is_dir()) for e in entries]
            except OSError:
                continue
            for name, is_dir in sorted(names, reverse=True):
                path = os.path.join(d, name)
                if is_dir:
                    if not name.startswith("."):
                        stack.append(path)
                elif any(fnmatch.fnmatchcase(name, pat) and (name[0] != "." or pat[0] == ".")
                         for pat in PATTERNS):
                    found.append(path)

    def _candidates(self) -> list[str]:
        found: list[str] = []
        seen: set[tuple[int, int]] = set()
        self.problems = []
        for p in self.paths:
            if os.path.isdir(p):
                self._walk(p, seen, found)
            else:
                found.append(p)
                head, name = os.path.split(p)
                found += glob.glob(os.path.join(glob.escape(head or "."),
                                                f".{glob.escape(name)}.*.tmp"))
        return sorted(set(found))

    def scan(self) -> list[Tail]:
        """The tails of the files there now (a renamed file keeps its tail)."""
        by_inode = {(t.dev, t.ino): t for t in self.tails.values() if t.ino >= 0}
        tails: dict[str, Tail] = {}
        for path in self._candidates():
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            tail = self.tails.get(path)
            if tail is None or (tail.dev, tail.ino) != (st.st_dev, st.st_ino):
                moved = by_inode.get((st.st_dev, st.st_ino))
                if moved is not None and moved.path not in tails:
                    moved.path = path
                    tail = moved
                elif tail is None:
                    tail = Tail(path)
            tails[path] = tail
        self.tails = tails
        return list(tails.values())
