"""Where samples go besides ``prober.history``: JSON Lines files."""

from __future__ import annotations

import errno
import json
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._errors import MemprobeWarning

if TYPE_CHECKING:
    from ._prober import Sample


class Sink(Protocol):
    """Anything with ``write(sample)`` and ``close()``."""

    def write(self, sample: Sample) -> None: ...

    def close(self) -> None: ...


#: Fields of every line; a tag with one of these names takes the slow path,
#: where it replaces the field as ``dict.update`` would.
_RECORD_FIELDS = frozenset(("time", "step", "pid", "values"))
_NUMBER_TYPES = frozenset((int, float))
#: Line templates kept per sink (one per distinct key tuple of ``values``).
_MAX_TEMPLATES = 64
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


def _template(keys: tuple[str, ...], tags_json: str) -> str:
    """The ``%``-format of one line for these value keys.

    Arguments: time (``%r``), step (``%s``: ``null`` or an int), pid (``%d``),
    then one ``%r`` per value. Keys are escaped once, here, by ``json.dumps``.
    """
    head = '{"time":%r,"step":%s,"pid":%d' + tags_json.replace("%", "%%")
    body = ",".join(json.dumps(k).replace("%", "%%") + ":%r" for k in keys)
    return head + ',"values":{' + body + "}}\n"


class JsonlSink:
    """Appends one JSON object per sample to a file, one ``write`` per line.

    Each line is ``{"time": unix_seconds, "step": step, "pid": pid,
    "values": {key: number}}`` plus the ``tags`` given (for example
    ``{"env_runner": 1}``). A killed process leaves at most a truncated last
    line. A write that fails (disk full, permission) is reported once with a
    :class:`MemprobeWarning` and the sink turns itself off: it never fails
    the job.

    ``path`` may contain ``{pid}``, replaced by the process id when the file
    is opened, so that several processes can share one setting. After a
    fork the child opens its own file.

    The line is formatted from a template kept per set of value keys (the
    keys escaped once) and written with one ``os.write`` on a file
    descriptor opened with ``O_APPEND``: no Python-level buffering. The
    output is byte-for-byte what ``json.dumps(record, separators=(",", ":"))``
    gives; samples the template cannot take (a value that is not an exact
    finite ``int`` or ``float``, a tag named like a field) go through
    ``json.dumps``.
    """

    def __init__(self, path: str | os.PathLike[str], *, tags: Mapping[str, Any] | None = None):
        self.path_template = os.fspath(path)
        self.tags = dict(tags or {})
        json.dumps(self.tags)  # fail now, in the caller, if a tag cannot be written
        self._fd = -1
        self._pid = -1
        self.failed = False
        self.path = ""
        self._templates: dict[tuple[str, ...], tuple[str, tuple[type, ...]]] = {}
        self._tags_seen: dict[str, Any] | None = None  # the tags the templates were made for
        self._tags_json = ""

    def _open(self) -> int:
        pid = os.getpid()
        self.path = self.path_template.replace("{pid}", str(pid))
        parent = os.path.dirname(self.path)
        if parent:
            if os.path.exists(parent) and not os.path.isdir(parent):  # makedirs: "File exists"
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), parent)
            os.makedirs(parent, exist_ok=True)
        # An fd inherited from the parent is left open: closing it by number in a
        # child that may have reused the number would close someone else's file.
        self._fd = os.open(self.path, _OPEN_FLAGS, 0o666)
        self._pid = pid
        return self._fd

    def _retag(self) -> bool:
        """Templates for the current tags (compared shallowly); False if they need the slow path."""
        tags = self.tags
        self._templates.clear()
        if _RECORD_FIELDS.intersection(tags):
            self._tags_seen = None
            return False
        dumped = json.dumps(tags, separators=(",", ":"))
        self._tags_json = "," + dumped[1:-1] if tags else ""
        self._tags_seen = dict(tags)
        return True

    def _line(self, sample: Sample) -> str:
        """The line written for ``sample``, newline included."""
        values = sample.values
        t = sample.time_seconds
        step = sample.step
        pid = sample.pid
        if (
            type(values) is dict
            and type(t) is float and t - t == 0
            and type(pid) is int
            and (step is None or type(step) is int)
            and (self.tags == self._tags_seen or self._retag())
        ):
            keys = tuple(values)
            vals = tuple(values.values())
            entry = self._templates.get(keys)
            types = tuple(map(type, vals))
            if entry is None or entry[1] != types:
                if not _NUMBER_TYPES.issuperset(types) or (
                    entry is None and not all(type(k) is str for k in keys)
                ):  # json.dumps writes 1 as "1": a non-str key takes the slow path
                    entry = None
                else:
                    if len(self._templates) >= _MAX_TEMPLATES:
                        self._templates.clear()
                    entry = self._templates[keys] = (_template(keys, self._tags_json), types)
            if entry is not None:
                try:
                    total = sum(vals)
                except OverflowError:  # an int too large for a float; json.dumps takes it
                    total = float("nan")
                if total - total == 0:  # no inf or nan (or a sum that overflowed)
                    return entry[0] % (t, "null" if step is None else step, pid, *vals)
        record: dict[str, Any] = {"time": t, "step": step, "pid": pid}
        record.update(self.tags)
        record["values"] = values
        return json.dumps(record, separators=(",", ":")) + "\n"

    def write(self, sample: Sample) -> None:
        if self.failed:
            return
        try:
            # A sample made in this process carries its pid: os.getpid() only otherwise.
            if sample.pid == self._pid or self._pid == os.getpid():
                fd = self._fd
            else:
                fd = self._open()
            data = self._line(sample).encode()
            n = os.write(fd, data)
            while n < len(data):  # a short write (a nearly full disk): append the rest
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                data = data[n:]
                n = os.write(fd, data)
        except (OSError, ValueError) as exc:
            self.failed = True
            warnings.warn(
                f"memprobe: writing samples to {self.path or self.path_template!r} failed "
                f"({type(exc).__name__}: {exc}); no more samples go to that file",
                MemprobeWarning,
                stacklevel=3,
            )

    def close(self) -> None:
        if self._fd >= 0 and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = -1
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_fd=-1, _pid=-1)
        return state
