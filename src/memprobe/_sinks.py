"""Where samples go besides ``prober.history``: JSON Lines files."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol

from ._errors import MemprobeWarning

if TYPE_CHECKING:
    from ._prober import Sample


class Sink(Protocol):
    """Anything with ``write(sample)`` and ``close()``."""

    def write(self, sample: Sample) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per sample to a file, flushed line by line.

    Each line is ``{"time": unix_seconds, "step": step, "pid": pid,
    "values": {key: number}}`` plus the ``tags`` given (for example
    ``{"env_runner": 1}``). A killed process leaves at most a truncated last
    line. A write that fails (disk full, permission) is reported once with a
    :class:`MemprobeWarning` and the sink turns itself off: it never fails
    the job.

    ``path`` may contain ``{pid}``, replaced by the process id when the file
    is opened, so that several processes can share one setting.
    """

    def __init__(self, path: str | os.PathLike[str], *, tags: Mapping[str, Any] | None = None):
        self.path_template = os.fspath(path)
        self.tags = dict(tags or {})
        json.dumps(self.tags)  # fail now, in the caller, if a tag cannot be written
        self._file: IO[str] | None = None
        self._pid = -1
        self.failed = False
        self.path = ""

    def _open(self) -> IO[str]:
        pid = os.getpid()
        self.path = self.path_template.replace("{pid}", str(pid))
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1)
        self._pid = pid
        return self._file

    def write(self, sample: Sample) -> None:
        if self.failed:
            return
        try:
            f = self._file if self._pid == os.getpid() else None
            if f is None:
                f = self._open()
            record: dict[str, Any] = {
                "time": sample.time_seconds, "step": sample.step, "pid": sample.pid
            }
            record.update(self.tags)
            record["values"] = sample.values
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
        except (OSError, ValueError) as exc:
            self.failed = True
            warnings.warn(
                f"memprobe: writing samples to {self.path or self.path_template!r} failed "
                f"({type(exc).__name__}: {exc}); no more samples go to that file",
                MemprobeWarning,
                stacklevel=3,
            )

    def close(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            try:
                self._file.close()
            except OSError:
                pass
        self._file = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_file=None, _pid=-1)
        return state
