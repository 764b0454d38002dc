"""Reading the JSON Lines files written by :class:`memprobe.JsonlSink`.

Each line is ``{"time": unix_seconds, "step": step, "pid": pid, ...tags,
"values": {key: number}}``. A bad or truncated line (a killed process leaves
a truncated last one) is skipped with a :class:`memprobe.MemprobeWarning`
naming the file and the line number; it never fails the read.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ._errors import JsonlReadError, MemprobeWarning
from ._sample import Sample

#: Fields of a line that are not tags.
RECORD_FIELDS = ("time", "step", "pid", "values")

__all__ = ["RECORD_FIELDS", "JsonlReadError", "Record", "iter_records", "read_samples"]


@dataclass
class Record:
    """One line: the sample, its tags (e.g. ``env_runner``), the file and line it came from."""

    sample: Sample
    tags: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    lineno: int = 0


def _parse(line: str) -> tuple[Sample, dict[str, Any]]:
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    values = obj.get("values")
    if not isinstance(values, dict):
        raise ValueError("no 'values' object")
    clean: dict[str, int | float] = {}
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"value of {k!r} is not a finite number: {v!r}")
        clean[k] = v
    t = obj.get("time", 0.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ValueError(f"'time' is not a number: {t!r}")
    step = obj.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise ValueError(f"'step' is not an int: {step!r}")
    pid = obj.get("pid", 0)
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise ValueError(f"'pid' is not an int: {pid!r}")
    tags = {k: v for k, v in obj.items() if k not in RECORD_FIELDS}
    return Sample(float(t), step, pid, clean), tags


def iter_records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """The records of one file, in order; bad lines are skipped with a warning.

    :raises JsonlReadError: the file does not exist or cannot be opened.
    """
    p = os.fspath(path)
    try:
        # newline="": lines end at "\n" only, so line numbers are those of an editor or
        # ``sed -n Np`` (a stray "\r" inside a bad line does not split it).
        f = open(p, encoding="utf-8", errors="replace", newline="")
    except FileNotFoundError:
        raise JsonlReadError(p, "no such file") from None
    except IsADirectoryError:
        raise JsonlReadError(p, "is a directory, not a JSONL file") from None
    except OSError as exc:
        raise JsonlReadError(p, f"cannot be read: {exc.strerror or exc}") from None
    with f:
        lines = f.read().split("\n")
    last = len(lines)
    if lines and lines[-1] == "":
        lines.pop()
        last = len(lines)
    for lineno, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")  # CRLF, if the file went through Windows
        if not line.strip():
            continue
        try:
            sample, tags = _parse(line)
        except (ValueError, TypeError) as exc:
            truncated = lineno == last and not line.endswith("}")
            what = "truncated last line" if truncated else "bad line"
            warnings.warn(
                f"{p}:{lineno}: {what} skipped ({exc})", MemprobeWarning, stacklevel=2
            )
            continue
        yield Record(sample, tags, p, lineno)


def read_samples(path: str | os.PathLike[str]) -> list[Sample]:
    """The samples of one file (bad lines skipped with a warning)."""
    return [r.sample for r in iter_records(path)]
