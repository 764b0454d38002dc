"""The ``memprobe`` entry points installed, from a cache while the installation is unchanged.

Finding them with :mod:`importlib.metadata` costs about 40 ms on a machine with
a hundred distributions (30 ms to import it, 10 ms to read every
distribution's metadata), paid by every process that makes its first
:class:`~memprobe.Prober`. The list is therefore kept in a small JSON file, one
per interpreter, and used while the fingerprint of the
installation matches: the ``*.dist-info`` and ``*.egg-info`` directories on
``sys.path`` and the modification time of each one's ``entry_points.txt``.
Installing, removing or reinstalling a distribution, or editing its entry
points, changes the fingerprint, and the next process scans again.

The cache lives in ``$MEMPROBE_CACHE_DIR``, else ``$XDG_CACHE_HOME/memprobe``,
else ``~/.cache/memprobe``; ``MEMPROBE_CACHE_DIR=`` (empty) turns it off. A
cache that cannot be read or written is ignored: memprobe then scans, as
without one. Distributions found only by a custom import hook (a
``sys.meta_path`` finder with ``find_distributions``) are seen by the scan but
do not enter the fingerprint: after installing one, clear the cache.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: The entry-point group memprobe plugins declare.
GROUP = "memprobe"
#: Where the cache lives; empty turns it off.
CACHE_ENV = "MEMPROBE_CACHE_DIR"
_FORMAT = 1


@dataclass(frozen=True)
class EntryPoint:
    """One entry point of the group: ``name = value`` declared by distribution ``dist_name``."""

    name: str
    value: str
    dist_name: str

    def load(self) -> Any:
        """The object ``value`` names (``module`` or ``module:attr.attr``), imported."""
        target = self.value.split("[", 1)[0].strip()  # extras do not change what loads
        module, _, attrs = target.partition(":")
        obj: Any = importlib.import_module(module.strip())
        for attr in filter(None, attrs.strip().split(".")):
            obj = getattr(obj, attr)
        return obj


def cache_dir() -> str | None:
    """The cache directory, or None when ``MEMPROBE_CACHE_DIR`` is set empty."""
    given = os.environ.get(CACHE_ENV)
    if given is not None:
        return given or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "memprobe")


def fingerprint() -> str:
    """The distributions on ``sys.path`` and their entry points' mtimes, as one text.

    Kept whole rather than hashed: comparing a few kilobytes costs less than
    importing :mod:`hashlib`, and no two installations can collide.
    """
    parts = [f"{_FORMAT}", sys.executable, sys.version]
    for entry in sys.path:
        parts.append(f"path {entry}")
        try:
            with os.scandir(entry or ".") as it:
                names = sorted(e.name for e in it if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:  # a zip file or a missing directory: its mtime, if any
            try:
                parts.append(f"mtime {os.stat(entry).st_mtime_ns}")
            except OSError:
                pass
            continue
        for name in names:
            try:
                mtime = os.stat(os.path.join(entry or ".", name, "entry_points.txt")).st_mtime_ns
            except OSError:
                mtime = -1
            parts.append(f"{name} {mtime}")
    return "\n".join(parts)


def _scan() -> list[EntryPoint]:
    import importlib.metadata  # here: most of a scan's cost is this import

    if sys.version_info >= (3, 10):
        selected: Iterable[Any] = importlib.metadata.entry_points(group=GROUP)
    else:
        selected = importlib.metadata.entry_points().get(GROUP, ())
    found = []
    for ep in selected:
        dist = getattr(getattr(ep, "dist", None), "name", None) or "<unknown distribution>"
        found.append(EntryPoint(ep.name, ep.value, dist))
    return found


def _cache_file(directory: str) -> str:
    """One file per interpreter: a process with another ``sys.path`` finds a fingerprint
    that does not match, scans, and replaces the file, so the directory never holds more
    files than there are interpreters (a test suite adds a temporary directory to
    ``sys.path`` in many processes)."""
    where = zlib.crc32(f"{sys.executable}\0{sys.version}".encode("utf-8", "surrogateescape"))
    return os.path.join(directory, f"entry-points-{where:08x}.json")


def _read(path: str, stamp: str) -> list[EntryPoint] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("fingerprint") != stamp:
            return None
        return [EntryPoint(str(n), str(v), str(d)) for n, v, d in data["entry_points"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _write(path: str, stamp: str, eps: Iterable[EntryPoint]) -> None:
    data = {"fingerprint": stamp,
            "entry_points": [[e.name, e.value, e.dist_name] for e in eps]}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def entry_points() -> list[EntryPoint]:
    """The installed entry points of the ``memprobe`` group, from the cache when it is current."""
    directory = cache_dir()
    if directory is None:
        return _scan()
    stamp = fingerprint()
    path = _cache_file(directory)
    cached = _read(path, stamp)
    if cached is not None:
        return cached
    found = _scan()
    _write(path, stamp, found)
    return found
