"""Every node's memprobe JSONL, where Ray serves it: the node's session log directory.

A process of a Ray job writes its JSONL under ``<session logs>/memprobe/<node id>/``
(:func:`session_jsonl_dir`). The dashboard agent of every node serves that
directory, and Ray's state API reads it from anywhere in the cluster
(``ray.util.state.list_logs`` and ``get_log``), so :func:`fetch_jsonl` copies
every node's files to one local directory, without ssh, each streamed to disk
in chunks and cut at ``max_file_bytes``: the reading process holds one chunk at
a time, whatever the number and size of the files.

The node id in the path matters where nodes share a log directory (the nodes of
``ray.cluster_utils.Cluster`` on one machine): a path seen on several nodes is
one file, read once, from its own node when that node answers, else from any
node that lists it, so a dead node's files are read while another node serves
its directory. A node that does not answer is listed in
:attr:`FetchedJsonl.unreachable`, never fatal.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "LOG_FOLDER",
    "FetchedFile",
    "FetchedJsonl",
    "Tails",
    "fetch_jsonl",
    "ray_logs_dir",
    "read_tails",
    "session_jsonl_dir",
]

#: The folder of the session log directory memprobe writes under.
LOG_FOLDER = "memprobe"
#: The default cap on the bytes copied of one file (the rest is left unread).
DEFAULT_MAX_FILE_BYTES = 256 * 2**20
#: Seconds each state API request may take.
TIMEOUT_SECONDS = 30


def ray_logs_dir() -> str | None:
    """This process's Ray session log directory, ``None`` outside a connected Ray process.

    Ray 2.60 has no public call for it: this is the one place memprobe reads it,
    from ``ray._private.worker.global_worker.node.get_logs_dir_path()`` (set in
    every worker and in a driver after ``ray.init``). Any change there gives
    ``None``, and the callers write no default JSONL rather than fail.
    """
    try:
        import ray

        if not ray.is_initialized():
            return None
        node = ray._private.worker.global_worker.node
        path = node.get_logs_dir_path() if node is not None else None
        return str(path) if path else None
    except Exception:  # Ray's internals moved: no default location
        return None


def session_jsonl_dir() -> str | None:
    """``<session logs>/memprobe/<node id>``: where this process's default JSONL goes.

    ``None`` outside a connected Ray process (then no default JSONL is written).
    """
    logs = ray_logs_dir()
    if logs is None:
        return None
    try:
        import ray

        node = str(ray.get_runtime_context().get_node_id())
    except Exception:
        return None
    return os.path.join(logs, LOG_FOLDER, node)


@dataclass
class FetchedFile:
    """One file copied from a node."""

    #: The node that served it.
    node_id: str
    #: Its path relative to that node's session log directory.
    name: str
    #: The local copy.
    path: str
    #: Bytes copied.
    size_bytes: int = 0
    #: Cut at the cap (the rest of the file was not read).
    cut: bool = False


@dataclass
class FetchedJsonl:
    """What :func:`fetch_jsonl` copied, and the nodes it could not read."""

    files: list[FetchedFile] = field(default_factory=list)
    #: ``(node id, why)`` of each node whose files could not be listed or read.
    unreachable: list[tuple[str, str]] = field(default_factory=list)


def _owner(name: str) -> str:
    """The node id a file's path names (``memprobe/<node id>/...``), or ``""``."""
    parts = name.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == LOG_FOLDER else ""


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def _copy(get_log: Callable[..., Any], address: str | None, node_id: str, name: str,
          dest: str, max_file_bytes: int) -> tuple[int, bool]:
    """Stream one file to ``dest``, at most ``max_file_bytes``; ``(bytes, cut)``."""
    size = 0
    cut = False
    stream = get_log(address=address, node_id=node_id, filename=name, encoding=None,
                     timeout=TIMEOUT_SECONDS)
    try:
        with open(dest, "wb") as out:
            for chunk in stream:
                room = max_file_bytes - size
                if len(chunk) > room:
                    out.write(chunk[:room])
                    size += room
                    cut = True
                    break
                out.write(chunk)
                size += len(chunk)
    finally:
        stream.close()  # closes the HTTP stream of a cut file
    return size, cut


def fetch_jsonl(dest: str | os.PathLike[str], address: str | None = None, *,
                max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                glob: str = f"{LOG_FOLDER}/**/*.jsonl*",
                on_file: Callable[[int, int, str], None] | None = None) -> FetchedJsonl:
    """Copy every node's memprobe JSONL into ``dest``, through Ray's state API.

    :param dest: an existing directory; each file is copied to ``dest/<name>``
        (``dest/memprobe/<node id>/memprobe-<pid>.jsonl``).
    :param address: the cluster (``"auto"``, ``"host:6379"``); default: the
        cluster this process is connected to, else the local one.
    :param max_file_bytes: the bytes copied of one file at most (its start);
        a cut file has ``cut`` set (its last line, cut, is skipped by the reader).
    :param glob: the files to copy, relative to each node's session log directory.
    :param on_file: called with ``(i, n, node id/name)`` before each file is copied.
    :raises ConnectionError: the state API (the head's dashboard) cannot be reached.
    """
    from ray.util.state import get_log, list_logs

    if max_file_bytes < 1:
        raise ValueError(f"max_file_bytes must be >= 1, got {max_file_bytes!r}")
    address, nodes = _nodes(address)
    result = FetchedJsonl()
    alive = {n.node_id for n in nodes if n.state == "ALIVE"}
    listed: dict[str, list[str]] = {}  # file name -> the nodes that list it
    for n in sorted(nodes, key=lambda n: n.node_id):
        if n.node_id not in alive:
            result.unreachable.append((n.node_id, f"node {n.state.lower()}"))
            continue
        try:
            groups = list_logs(address=address, node_id=n.node_id, glob_filter=glob,
                               timeout=TIMEOUT_SECONDS)
        except Exception as exc:
            result.unreachable.append((n.node_id, _why(exc)))
            continue
        for names in groups.values():
            for name in names:
                if not name.endswith("/"):
                    listed.setdefault(name, []).append(n.node_id)
    plan = sorted(listed.items())
    for i, (name, servers) in enumerate(plan, start=1):
        owner = _owner(name)
        order = sorted(servers, key=lambda s: s != owner)  # its own node first
        if on_file is not None:
            on_file(i, len(plan), f"{owner or order[0]}/{name}")
        parts = [p for p in name.split("/") if p not in ("", ".", "..")]
        local = os.path.join(os.fspath(dest), *parts)  # the node's layout, node id included
        os.makedirs(os.path.dirname(local), exist_ok=True)
        for node_id in order:
            try:
                size, cut = _copy(get_log, address, node_id, name, local, max_file_bytes)
            except Exception as exc:
                if os.path.exists(local):
                    os.unlink(local)
                if node_id == order[-1]:
                    result.unreachable.append((node_id, f"{name}: {_why(exc)}"))
                continue
            result.files.append(FetchedFile(node_id, name, local, size, cut))
            break
    return result


@dataclass
class Tails:
    """The last lines of every node's files (:func:`read_tails`)."""

    #: ``(node id, file name, bytes)`` of each file.
    files: list[tuple[str, str, bytes]] = field(default_factory=list)
    unreachable: list[tuple[str, str]] = field(default_factory=list)


def _answers(address: str | None) -> None:
    """Fail at once when nothing listens at a ``host:port`` address (``http://`` allowed):
    the state API would retry for its whole timeout before saying so."""
    import socket
    import urllib.parse

    if not address or address == "auto":
        return
    hostport = urllib.parse.urlsplit(address if "//" in address else f"//{address}")
    try:
        port = hostport.port
    except ValueError:
        return  # not host:port; the state API says what is wrong with it
    if not hostport.hostname or port is None:
        return
    try:
        socket.create_connection((hostport.hostname, port), timeout=3).close()
    except OSError as exc:
        raise ConnectionError(f"Ray's state API at {address} did not answer: nothing "
                              f"accepts connections there ({exc.strerror or exc})") from None


def _nodes(address: str | None) -> tuple[str | None, list[Any]]:
    from ray.util.state import list_nodes

    import ray

    if address is None and ray.is_initialized():
        address = ray.get_runtime_context().gcs_address
    _answers(address)
    try:
        return address, list(list_nodes(address=address, limit=10_000, timeout=TIMEOUT_SECONDS,
                                        raise_on_missing_output=False))
    except Exception as exc:
        raise ConnectionError(f"Ray's state API at {address or 'the local cluster'} did not "
                              f"answer (it needs the dashboard on the head node): "
                              f"{_why(exc)}") from None


def read_tails(address: str | None = None, *, lines: int = 240,
               max_file_bytes: int = 4 * 2**20,
               glob: str = f"{LOG_FOLDER}/**/*.jsonl") -> Tails:
    """The last ``lines`` lines (at most ``max_file_bytes``) of every node's memprobe JSONL.

    What ``memprobe top --ray`` reads at each refresh: Ray's state API serves
    the end of a file by lines, not from an offset, so a reader that follows
    files asks for the last lines again and skips the samples it has seen.
    Files are read one at a time. Nodes that do not answer are listed.

    :raises ConnectionError: the state API cannot be reached.
    """
    from ray.util.state import get_log, list_logs

    address, nodes = _nodes(address)
    out = Tails()
    seen: set[str] = set()
    for n in sorted(nodes, key=lambda n: n.node_id):
        if n.state != "ALIVE":
            continue
        try:
            groups = list_logs(address=address, node_id=n.node_id, glob_filter=glob,
                               timeout=TIMEOUT_SECONDS)
        except Exception as exc:
            out.unreachable.append((n.node_id, _why(exc)))
            continue
        for name in sorted(x for names in groups.values() for x in names):
            if name.endswith("/") or name in seen:
                continue
            seen.add(name)  # nodes sharing a log directory list the same file
            data = bytearray()
            try:
                stream = get_log(address=address, node_id=n.node_id, filename=name,
                                 tail=lines, encoding=None, timeout=TIMEOUT_SECONDS)
                try:
                    for chunk in stream:
                        data += chunk
                        if len(data) > max_file_bytes:
                            break
                finally:
                    stream.close()
            except Exception as exc:
                out.unreachable.append((n.node_id, f"{name}: {_why(exc)}"))
                continue
            owner = _owner(name) or n.node_id
            out.files.append((owner, name, bytes(data[-max_file_bytes:])))
    return out
