"""Sinks: where samples go besides ``prober.history``. The built-in one writes JSON Lines.

A sink is anything with ``write(sample)`` and ``close()``. Sinks are
registered by name through the ``memprobe_register_sinks`` hook; this module
registers the ``jsonl`` sink that way, like any third-party plugin, and
``Prober(sinks={"jsonl": {"path": ...}})`` chooses it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import warnings
from collections.abc import Mapping
from typing import Any, Protocol

from ..keys import key_head
from .._errors import ConfigError, MemprobeWarning, show
from .._jsonl_fields import MAX_KEY_CHARS, MAX_LINE_BYTES, RECORD_FIELDS
from .._keptfd import identity, same_file
from .._pid import getpid
from .._sample import Sample
from ..hookspecs import hookimpl


class Sink(Protocol):
    """Anything with ``write(sample)`` and ``close()``.

    ``write`` is called with each finished :class:`memprobe.Sample`, in the
    sampling thread, under the Prober's lock: keep it short (hand slow work to
    a thread). An exception from it is counted in ``<prefix>/errors/<sink>``
    and never reaches the caller. ``close`` is called by ``Prober.stop()``.
    """

    def write(self, sample: Sample) -> None: ...

    def close(self) -> None: ...




def check_jsonl_tags(option: str, tags: Any) -> dict[str, Any]:
    """Tags of a JSONL sink: a mapping of str keys to JSON values, none named like a field."""
    if not isinstance(tags, Mapping):
        raise ConfigError(option, f"must be a mapping, got {show(tags)}")
    for k, v in tags.items():
        if not isinstance(k, str):
            raise ConfigError(option, f"keys must be str, got {show(k)}")
        if k in RECORD_FIELDS:
            raise ConfigError(option, f"{k!r} is a field of every JSONL line; rename the tag")
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{option}.{k}", f"cannot be written as JSON: {exc}") from None
    return dict(tags)


# Never through a symlink (O_NOFOLLOW), never blocking on a FIFO planted at the path
# (O_NONBLOCK; a FIFO, a socket or a block device is then refused from its fstat; a
# character device such as /dev/null is written as the user asked).
_OPEN_FLAGS = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))

_orjson: Any = None  # orjson, imported by the first JsonlSink (not by ``import memprobe``)
_ORJSON_OPTIONS = 0


def _load_orjson() -> None:
    global _orjson, _ORJSON_OPTIONS
    try:  # a dependency on CPython (pyproject); json is the fallback elsewhere
        import orjson
    except ImportError:  # pragma: no cover - PyPy, or installed without dependencies
        return
    _orjson, _ORJSON_OPTIONS = orjson, orjson.OPT_APPEND_NEWLINE


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _json_line(record: dict[str, Any]) -> bytes:
    """The line by ``json.dumps``, with nan and infinity as ``null``, as orjson writes them.

    Strict JSON either way: ``json.dumps`` alone would write ``NaN``, which
    most JSON readers reject.
    """
    clean = {k: _finite_or_none(v) for k, v in record.items()}
    values = record["values"]
    if isinstance(values, Mapping):
        clean["values"] = {k: _finite_or_none(v) for k, v in values.items()}
    return (json.dumps(clean, separators=(",", ":")) + "\n").encode()


class JsonlSink:
    """Appends one JSON object per sample to a file, one ``write`` per line.

    Each line is ``{"time": unix_seconds, "step": step, "pid": pid,
    "values": {key: number}}`` plus the ``tags`` given (for example
    ``{"env_runner": 1}``; a tag named like a field replaces it). A killed
    process leaves at most a truncated last line. A write that fails (disk
    full, permission) is reported once with a :class:`MemprobeWarning` and the
    sink turns itself off: it never fails the job.

    ``path`` may contain ``{pid}``, replaced by the process id when the file
    is opened, so that several processes can share one setting. After a
    fork the child opens its own file.

    The sink checks before each write that its file descriptor still refers
    to its file (device and inode; one ``fstat``). When the program closed it,
    or closed it and opened a file of its own under the same number, the sink
    never writes there: it warns once, naming the path, and reopens the path
    if it is still the same file (else no more samples go to it).

    Lines are encoded by `orjson <https://github.com/ijl/orjson>`_ (far
    cheaper than ``json.dumps``: docs/performance.md) and written
    with one ``os.write`` on a file descriptor opened with ``O_APPEND``: no
    Python-level buffering, so each line is in the file when ``write``
    returns. What orjson refuses (an int outside 64 bits, a non-str key, a
    float subclass such as ``numpy.float64``, a str that is not valid UTF-8)
    goes through ``json.dumps``, as does everything where orjson is not
    installed. Every line is strict JSON: it has no NaN or infinity, so such
    a float (which the Prober never produces) is written as ``null``.
    """

    def __init__(self, path: str | os.PathLike[str], *, tags: Mapping[str, Any] | None = None):
        if _orjson is None:
            _load_orjson()
        self.path_template = os.fspath(path)
        self.tags = dict(tags or {})
        json.dumps(self.tags)  # fail now, in the caller, if a tag cannot be written
        self._fd = -1
        self._pid = -1
        self._ident = (-1, -1)
        self.failed = False
        self.path = ""
        #: The lines written whole to the file.
        self.lines_written = 0
        self._too_long: set[str] = set()  # the probes (key prefixes) warned about

    #: Whether ``{pid}`` in the path is replaced (``memprobe run`` gives a literal path).
    expand_pid = True

    def _open(self) -> int:
        pid = getpid()
        self.path = (self.path_template.replace("{pid}", str(pid)) if self.expand_pid
                     else self.path_template)
        parent = os.path.dirname(self.path)
        if parent:
            if os.path.exists(parent) and not os.path.isdir(parent):  # makedirs: "File exists"
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), parent)
            os.makedirs(parent, exist_ok=True)
        # An fd inherited from the parent is left open: closing it by number in a
        # child that may have reused the number would close someone else's file.
        try:
            fd = os.open(self.path, _OPEN_FLAGS, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP and os.path.islink(self.path):
                raise OSError(errno.ELOOP, "it is a symbolic link; memprobe does not write "
                              "through symlinks") from None
            if exc.errno == errno.ENXIO:  # O_NONBLOCK on a FIFO nobody reads
                raise OSError(errno.ENXIO, "it is a FIFO; memprobe writes regular files "
                              "only") from None
            raise
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
                raise OSError(errno.EINVAL, "it exists and is a FIFO, a socket or a block "
                              "device; memprobe writes regular files (or /dev/null) only")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._ident = st.st_dev, st.st_ino
        self._pid = pid
        return fd

    def _reopen(self) -> int:
        """A new fd on the path when it is still the file first opened, else -1 (the sink
        turns itself off); the old fd (closed, or reused by the program) is left alone."""
        self._fd = -1
        what = (f"memprobe: the file descriptor of {self.path!r} was closed or reused by "
                "the program, so memprobe no longer writes to it")
        try:
            fd = os.open(self.path, _OPEN_FLAGS & ~os.O_CREAT | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            why = f"reopening the path failed ({exc.strerror})"
        else:
            if identity(fd) == self._ident:
                self._fd = fd
                self._warn(f"{what}; it reopened the path and goes on writing there")
                return fd
            os.close(fd)
            why = "the path is now another file"
        self.failed = True
        self._warn(f"{what}; {why}; no more samples go to that file")
        return -1

    def _warn(self, message: str) -> None:
        """Report a fault of this sink (a :class:`MemprobeWarning`)."""
        warnings.warn(message, MemprobeWarning, stacklevel=4)

    def _line(self, sample: Sample) -> bytes:
        """The line written for ``sample``, newline included."""
        return self._encode(sample.time_seconds, sample.step, sample.pid, sample.values,
                            sample.labels)

    def _encode(self, time_seconds: float, step: int | None, pid: int,
                values: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> bytes:
        record: dict[str, Any] = {"time": time_seconds, "step": step, "pid": pid}
        if self.tags:
            record.update(self.tags)
        if labels:  # phase markers, a capture's holders (memprobe._jsonl_fields.TEXT_FIELDS)
            record.update(labels)
        record["values"] = values
        if _orjson is not None:
            try:
                return _orjson.dumps(record, option=_ORJSON_OPTIONS)
            except TypeError:  # orjson.JSONEncodeError: what json.dumps takes below
                pass
        return _json_line(record)

    def write(self, sample: Sample) -> None:
        self._write_values(sample.time_seconds, sample.step, sample.pid, sample.values,
                           sample.labels)

    def _write_values(self, time_seconds: float, step: int | None, pid: int,
                      values: Mapping[str, Any],
                      labels: Mapping[str, str] | None = None) -> None:
        """``write`` of a sample given by its fields."""
        if self.failed:
            return
        try:
            # A sample made in this process carries its pid: getpid() only otherwise.
            if pid == self._pid or self._pid == getpid():
                fd = self._fd
                if not same_file(fd, self._ident):
                    fd = self._reopen()
                    if fd < 0:
                        return
            else:
                fd = self._open()
            record: dict[str, Any] = {"time": time_seconds, "step": step, "pid": pid}
            if self.tags:
                record.update(self.tags)
            if labels:  # phase markers, a capture's holders (memprobe._jsonl_fields.TEXT_FIELDS)
                record.update(labels)
            record["values"] = values
            data = b""  # _encode, inlined: this is every sample's path
            if _orjson is not None:
                try:
                    data = _orjson.dumps(record, option=_ORJSON_OPTIONS)
                except TypeError:  # orjson.JSONEncodeError: what json.dumps takes below
                    pass
            if not data:
                data = _json_line(record)
            if len(data) > MAX_KEY_CHARS:  # a key may be too long: the slow path checks
                data = self._capped(record, data)
                if not data:
                    return
            n = os.write(fd, data)
            while n < len(data):  # a short write (a nearly full disk): append the rest
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                data = data[n:]
                n = os.write(fd, data)
            self.lines_written += 1
        except (OSError, ValueError) as exc:
            self.failed = True
            self._warn(f"memprobe: writing samples to {self.path or self.path_template!r} "
                       f"failed ({type(exc).__name__}: {exc}); no more samples go to that file")

    def _capped(self, record: dict[str, Any], data: bytes) -> bytes:
        """``data`` without the keys over :data:`MAX_KEY_CHARS`, and, while the line is
        over :data:`MAX_LINE_BYTES`, without the values of the probe whose keys take the
        most of it; each probe warned about once, by its keys' prefix (``memprobe/big``).
        Empty when nothing is left to write."""
        values = record["values"]
        if not isinstance(values, Mapping):
            return data if len(data) <= MAX_LINE_BYTES else b""
        long_keys = [k for k in values if len(str(k)) > MAX_KEY_CHARS]
        if not long_keys and len(data) <= MAX_LINE_BYTES:
            return data
        kept = dict(values)
        for k in long_keys:
            del kept[k]
            self._too_long_warning(_probe_of(k), f"a key of {len(str(k)):,} characters "
                                   f"(over {MAX_KEY_CHARS:,}): {str(k)[:60]!r}…")
        while True:
            line = self._encode(record["time"], record["step"], record["pid"], kept,
                                {k: v for k, v in record.items()
                                 if k not in RECORD_FIELDS})
            if len(line) <= MAX_LINE_BYTES:
                return line
            sizes: dict[str, int] = {}
            for k in kept:
                sizes[_probe_of(k)] = sizes.get(_probe_of(k), 0) + len(str(k)) + 24
            if not sizes:
                self._too_long_warning("", f"a line of {len(line):,} bytes without values")
                return b""
            worst = max(sizes, key=sizes.__getitem__)
            kept = {k: v for k, v in kept.items() if _probe_of(k) != worst}
            self._too_long_warning(worst, f"its values make a line over "
                                   f"{MAX_LINE_BYTES // 2**20} MiB, which readers skip")

    def _too_long_warning(self, probe: str, what: str) -> None:
        if probe in self._too_long:
            return
        self._too_long.add(probe)
        who = f"the probe {probe!r}" if probe else "a sample"
        self._warn(f"memprobe: {who} gave {what}; memprobe left that out of "
                   f"{self.path or self.path_template!r} (the other values are written)")

    def close(self) -> None:
        if self._fd >= 0 and self._pid == getpid() and same_file(self._fd, self._ident):
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


def _probe_of(key: Any) -> str:
    """The probe of a key, as its first two parts (``memprobe/big`` of ``memprobe/big/x``)."""
    return key_head(str(key))


def jsonl_sink(*, path: str | os.PathLike[str], tags: Mapping[str, Any] | None = None) -> JsonlSink:
    """The ``jsonl`` sink: ``path`` (``{pid}`` is replaced by the process id) and ``tags``
    (extra fields of each line, e.g. ``{"env_runner": 1}``)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError("sinks.jsonl.path", f"must be a path, got {show(path)}")
    if tags is not None:
        tags = check_jsonl_tags("sinks.jsonl.tags", tags)
    return JsonlSink(path, tags=tags)


@hookimpl
def memprobe_register_sinks(register: Any) -> None:
    register("jsonl", jsonl_sink)
