"""Reading the JSON Lines files written by :class:`memprobe.JsonlSink`.

Each line is ``{"time": unix_seconds, "step": step, "pid": pid, ...tags,
"values": {key: number}}``; the phase markers ``mark``, ``phase`` and
``phase_edge`` (str), and the referrer chains ``holders`` of the leak alarm's
capture line (str, one chain per line), go to ``Sample.labels``, not to the
tags. The reader is
built for files from elsewhere:

- only regular files are read (a FIFO, ``/dev/zero`` or a directory, also
  behind a symlink, is refused with :class:`JsonlReadError`), so a read never
  blocks and never grows without bound;
- the file is streamed line by line; a line longer than
  :data:`MAX_LINE_BYTES` is skipped unread, so memory stays within a few
  times that cap whatever the file holds;
- the file is read up to its size when opened (a file that grows while it is
  read ends there); reading stops, with a warning, after
  :data:`MAX_SKIP_BYTES` without a newline (a sparse file of zeros) or
  :data:`MAX_READ_BYTES` in all (a gzip bomb);
- after :data:`MAX_WARNINGS` bad lines in a file, the rest are counted, not
  warned one by one: one last warning gives their number;
- ``step`` must be under 2**1000 (it is read as a float) and ``pid`` within
  64 bits;
  a lone surrogate in a str (``"\\udc00"``) is kept escaped, so that any
  report can print it;
- a gzip file (``run.jsonl.gz``, recognized by its first bytes, whatever its
  name) is decompressed on the fly;
- a bad or truncated line (a killed process leaves a truncated last one) is
  skipped with a :class:`memprobe.MemprobeWarning` naming the file and the
  line; any exception from one line (``RecursionError`` from deep nesting
  included) skips that line only;
- when the first :data:`BAD_START_LINES` lines are all bad, the file is not
  a memprobe JSONL file: :class:`JsonlReadError` says so, once, instead of one
  warning per line.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import stat
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

from .._errors import JsonlReadError, MemprobeWarning
from .._jsonl_fields import MAX_LINE_BYTES, RECORD_FIELDS, TEXT_FIELDS
from .._sample import Sample

#: This many bad lines before any good one: not a memprobe JSONL file.
BAD_START_LINES = 5
#: Bytes skipped without a newline after a line over :data:`MAX_LINE_BYTES`, before the
#: rest of the file is given up.
MAX_SKIP_BYTES = 256 * 2**20
#: Bytes read from one file (after gzip decompression) before the rest is given up.
MAX_READ_BYTES = 16 * 2**30
#: Bad lines warned about one by one in a file; the others are counted.
MAX_WARNINGS = 10
_INT64 = 2**63
_GZIP_MAGIC = b"\x1f\x8b"
_END = object()
_CHUNK = 2**20

__all__ = [
    "BAD_START_LINES",
    "MAX_LINE_BYTES",
    "MAX_READ_BYTES",
    "MAX_SKIP_BYTES",
    "MAX_WARNINGS",
    "RECORD_FIELDS",
    "JsonlReadError",
    "JsonlRecord",
    "iter_records",
    "parse_line",
    "read_samples",
]


@dataclass
class JsonlRecord:
    """One line: the sample, its tags (e.g. ``env_runner``), the file and line it came from."""

    sample: Sample
    tags: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    lineno: int = 0


def _number(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{name} is not a number: {_clip(repr(v))}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"{name} is not a finite number: {_clip(repr(v))}")
    return f


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _int64(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name} is not an int: {_clip(repr(v))}")
    if not -_INT64 <= v < _INT64:
        raise ValueError(f"{name} is outside the 64-bit range")
    return v


def _unescaped(obj: Any) -> Any:
    """``obj`` with each lone surrogate of its strs written as ``\\udc00``."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return obj.encode("utf-8", "backslashreplace").decode("utf-8")
        return obj
    if isinstance(obj, dict):
        return {_unescaped(k): _unescaped(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unescaped(v) for v in obj]
    return obj


def _parse(line: bytes) -> tuple[Sample, dict[str, Any]]:
    if not line.lstrip().startswith(b"{"):  # the common bad line, without json's exception
        raise ValueError("not a JSON object")
    obj = json.loads(line.decode("utf-8", errors="replace"))
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if b"\\u" in line:  # a lone surrogate can only come from an escape
        obj = _unescaped(obj)
    values = obj.get("values")
    if not isinstance(values, dict):
        raise ValueError("no 'values' object")
    clean: dict[str, int | float] = {}
    for k, v in values.items():
        _number(f"value of {_clip(repr(k))}", v)
        clean[k] = v
    t = _number("'time'", obj.get("time", 0.0))
    step = obj.get("step")
    if step is not None:
        if isinstance(step, float):  # a time given as the step
            _number("'step'", step)
        elif isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"'step' is not a number: {_clip(repr(step))}")
        elif step.bit_length() > 1000:  # steps are read as floats: keep them finite
            raise ValueError("'step' is too large to be read as a number")
    pid = _int64("'pid'", obj.get("pid", 0))
    labels = {k: obj[k] for k in TEXT_FIELDS if isinstance(obj.get(k), str)}
    tags = {k: v for k, v in obj.items() if k not in RECORD_FIELDS and k not in labels}
    return Sample(t, step, pid, clean, labels or None), tags


def _open(p: str) -> IO[bytes] | gzip.GzipFile:
    """The file opened for binary reading: regular files only, never blocking on open."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise JsonlReadError(p, "no such file") from None
    except IsADirectoryError:
        raise JsonlReadError(p, "is a directory, not a JSONL file") from None
    except OSError as exc:
        raise JsonlReadError(p, f"cannot be read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise JsonlReadError(p, "is a directory, not a JSONL file")
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a character device"
                    if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            raise JsonlReadError(p, f"is {kind}, not a regular file; memprobe reads files only")
        os.set_blocking(fd, True)
        raw: IO[bytes] = io.BufferedReader(_UpTo(fd, os.fstat(fd).st_size), _CHUNK)
    except BaseException:
        os.close(fd)
        raise
    try:
        head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    except OSError as exc:
        raw.close()
        raise JsonlReadError(p, f"cannot be read: {exc.strerror or exc}") from None
    if head == _GZIP_MAGIC:
        return _Gzip(raw)
    return raw


class _UpTo(io.RawIOBase):
    """The file ``fd`` up to ``size`` bytes: its size when opened, so that a file that
    grows while it is read (another process appending) ends."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buffer)
        n = os.readv(self._fd, [view[: min(len(view), self._left)]])
        self._left -= n
        return n

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


class _Gzip(gzip.GzipFile):
    """A gzip stream that closes the file under it too."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _lines(f: IO[bytes] | gzip.GzipFile) -> Iterator[bytes | str | None]:
    """Each line without its newline; ``None`` for a line over the cap (its bytes skipped);
    last, a str saying why reading stops early: :data:`MAX_SKIP_BYTES` without a newline,
    or :data:`MAX_READ_BYTES` in all."""
    total = 0
    while True:
        line = f.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        total += len(line)
        if line.endswith(b"\n"):
            yield line[:-1]
        elif len(line) <= MAX_LINE_BYTES:
            yield line  # the last line, with no newline
        else:
            del line
            skipped = 0
            while True:  # skip the rest of the long line, a chunk at a time
                chunk = f.readline(_CHUNK)
                skipped += len(chunk)
                if not chunk or chunk.endswith(b"\n"):
                    break
                if skipped >= MAX_SKIP_BYTES:
                    yield f"no newline in {(MAX_LINE_BYTES + skipped) // 2**20} MiB"
                    return
            total += skipped
            yield None
        if total >= MAX_READ_BYTES:
            yield (f"{MAX_READ_BYTES // 2**30} GiB read, the most memprobe reads from one "
                   "file")
            return


def _until_given_up(lines: Iterator[bytes | str | None], why: list[str]
                    ) -> Iterator[bytes | None]:
    """``lines`` up to the str that says why reading stops (put in ``why``), if any."""
    for line in lines:
        if isinstance(line, str):
            why.append(line)
            return
        yield line


def iter_records(path: str | os.PathLike[str]) -> Iterator[JsonlRecord]:
    """The records of one file, in order; bad lines are skipped with a warning.

    :raises JsonlReadError: the file does not exist, cannot be opened, is not
        a regular file, or is not a memprobe JSONL file (its first
        :data:`BAD_START_LINES` lines are all bad).
    """
    p = os.fspath(path)
    f = _open(p)
    gzipped = isinstance(f, gzip.GzipFile)
    held: list[str] = []  # warnings for the bad lines before the first good one
    good = False
    lineno = 0
    bad = 0  # bad lines warned about, then counted
    with f:
        try:
            it = _lines(f)
            gave_up: list[str] = []
            it = _until_given_up(it, gave_up)
            pending: object = next(it, _END)  # one line ahead, to know the last one
            while pending is not _END:
                line = cast("bytes | None", pending)
                lineno += 1
                pending = next(it, _END)
                last = pending is _END
                message = None
                if line is None:
                    message = f"line longer than {MAX_LINE_BYTES // 2**20} MiB skipped"
                else:
                    line = line.removesuffix(b"\r")  # CRLF, if the file went through Windows
                    if not line.strip():
                        continue
                    try:
                        sample, tags = _parse(line)
                    except Exception as exc:  # RecursionError and MemoryError included
                        truncated = last and not line.rstrip().endswith(b"}")
                        what = "truncated last line" if truncated else "bad line"
                        why = str(exc) if isinstance(exc, (ValueError, TypeError)) else (
                            f"{type(exc).__name__}: {exc}")
                        message = f"{what} skipped ({_clip(why, 200)})"
                if message is not None:
                    text = f"{p}:{lineno}: {message}"
                    if good:
                        bad += 1
                        if bad <= MAX_WARNINGS:
                            warnings.warn(text, MemprobeWarning, stacklevel=2)
                        continue
                    held.append(text)
                    if len(held) >= BAD_START_LINES:
                        raise JsonlReadError(
                            p, f"not a memprobe JSONL file (its first {len(held)} lines are "
                            "not samples of the form {\"time\", \"pid\", \"values\": {...}})")
                    continue
                if not good:
                    good = True
                    for text in held:
                        warnings.warn(text, MemprobeWarning, stacklevel=2)
                    bad = len(held)
                    held.clear()
                yield JsonlRecord(sample, tags, p, lineno)
            for why in gave_up:
                warnings.warn(f"{p}:{lineno + 1}: reading stopped ({why}); the lines before "
                              "are kept", MemprobeWarning, stacklevel=2)
        except (OSError, EOFError, zlib.error) as exc:  # a cut or corrupt gzip, an I/O error
            cause = getattr(exc, "strerror", None) or exc
            if lineno == 0 and gzipped:
                raise JsonlReadError(p, "not a memprobe JSONL file (it starts like gzip, "
                                     f"but: {cause})") from None
            warnings.warn(f"{p}:{lineno + 1}: reading stopped ({cause}); the lines before "
                          "are kept", MemprobeWarning, stacklevel=2)
    for text in held:  # a short file with no good line: its few bad lines
        warnings.warn(text, MemprobeWarning, stacklevel=2)
    if bad > MAX_WARNINGS:
        warnings.warn(f"{p}: and {bad - MAX_WARNINGS:,} more bad lines skipped",
                      MemprobeWarning, stacklevel=2)


def read_samples(path: str | os.PathLike[str]) -> list[Sample]:
    """The samples of one file (bad lines skipped with a warning).

    :raises JsonlReadError: see :func:`iter_records`.
    """
    return [r.sample for r in iter_records(path)]


def parse_line(line: bytes) -> tuple[Sample, dict[str, Any]]:
    """One line's sample and tags (for readers that follow a file as it grows).

    :raises ValueError: the line is not a sample (any other exception from
        a hostile line, such as ``RecursionError``, propagates as well).
    """
    return _parse(line)
