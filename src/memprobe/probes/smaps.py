"""``smaps``: this process's resident memory by kind (anonymous, file-backed, shmem), swap
and private dirty bytes, from ``/proc/self/smaps_rollup`` and ``/proc/self/status``."""

from __future__ import annotations

import os
import sys
from typing import Any

from .._errors import ConfigError, ProbeError, show
from .._pid import current_pid, getpid
from ..hookspecs import hookimpl
from ..metrics import Metric

# field in the kernel's file (kB) -> metric. /proc/self/status has the kernel's
# per-kind resident counters (cheap: no walk); smaps_rollup walks every mapping
# for what only a walk can tell (proportional and dirty pages).
_STATUS = {
    b"VmRSS": "rss_bytes",
    b"RssAnon": "anonymous_bytes",
    b"RssFile": "file_bytes",
    b"RssShmem": "shmem_bytes",
    b"VmSwap": "swap_bytes",
}
_ROLLUP = {
    b"Pss": "pss_bytes",
    b"Private_Dirty": "private_dirty_bytes",
}


def parse_kb_fields(text: bytes, fields: dict[bytes, str]) -> dict[str, int]:
    """``{metric: bytes}`` for the ``Name:   123 kB`` lines of ``text`` named in ``fields``.

    ```pycon
    >>> parse_kb_fields(b"Rss:  12 kB\\nPss:  3 kB\\n", {b"Rss": "rss_bytes"})
    {'rss_bytes': 12288}

    ```
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(b":")
        metric = fields.get(name)
        if metric is not None and sep:
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[metric] = int(parts[0]) * (1024 if parts[1:2] == [b"kB"] else 1)
    return out


class SmapsProbe:
    """Resident memory by kind: anonymous, file-backed, shmem; swap; private dirty; rss, pss.

    Linux only; elsewhere ``start()`` raises a :class:`~memprobe.ProbeError`
    saying why, so the Prober disables the probe with one warning. The kinds,
    rss and swap come from the kernel's counters in ``/proc/self/status``.
    ``pss_bytes`` and ``private_dirty_bytes`` come from
    ``/proc/self/smaps_rollup`` (kernel 4.14+), which walks the page tables of
    every mapping, at a cost that grows with the mappings (torch's are many);
    ``rollup=False`` leaves them out. Give the probe an ``every`` or
    ``interval_seconds`` in a hot loop (costs: docs/performance.md).
    """

    metrics = {
        "rss_bytes": Metric("resident set size, all kinds", "bytes"),
        "pss_bytes": Metric("proportional set size: shared pages divided among their users "
                            "(rollup=True)", "bytes"),
        "anonymous_bytes": Metric("resident anonymous memory: heaps, arenas, anonymous mmap, "
                                  "copy-on-write pages", "bytes", judged=True),
        "file_bytes": Metric("resident file-backed pages: mapped files, shared libraries",
                             "bytes", judged=True, growth="mmap"),
        "shmem_bytes": Metric("resident shared memory: tmpfs, /dev/shm, shared anonymous "
                              "mappings", "bytes"),
        "swap_bytes": Metric("anonymous memory swapped out", "bytes"),
        "private_dirty_bytes": Metric("pages written by this process alone: what it would "
                                      "free on exit (rollup=True)", "bytes"),
    }

    def __init__(self, *, rollup: bool = True) -> None:
        if not isinstance(rollup, bool):
            raise ConfigError("smaps.rollup", f"must be a bool, got {show(rollup)}")
        self.rollup = rollup
        self._rollup = -1
        self._status = -1
        self._opened_in = -1

    def start(self) -> None:
        if not sys.platform.startswith("linux"):
            raise ProbeError("smaps", f"unsupported: /proc/self/smaps_rollup is Linux only, "
                             f"not {sys.platform}")
        self._open()

    def stop(self) -> None:
        self._close()

    def _open(self) -> None:
        self._close()
        pid = getpid()
        try:
            self._status = os.open(f"/proc/{pid}/status", os.O_RDONLY)
            if self.rollup:
                self._rollup = os.open(f"/proc/{pid}/smaps_rollup", os.O_RDONLY)
        except OSError as exc:
            self._close()
            raise ProbeError("smaps", f"unsupported: {exc} (smaps_rollup needs Linux 4.14+; "
                             "rollup=False reads /proc/<pid>/status alone)") from None
        self._opened_in = current_pid()

    def _close(self) -> None:
        for fd in (self._rollup, self._status):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._rollup = self._status = -1

    def __del__(self) -> None:
        self._close()

    def __getstate__(self) -> dict[str, Any]:  # kept fds do not pickle
        state = self.__dict__.copy()
        state.update(_rollup=-1, _status=-1, _opened_in=-1)
        return state

    def sample(self) -> dict[str, int]:
        if self._opened_in != current_pid():  # started lazily, or forked since
            # the fds are the parent's (they name its /proc entries): leave them open
            self._rollup = self._status = -1
            self._open()
        out = parse_kb_fields(_pread_all(self._status), _STATUS)
        if self._rollup >= 0:
            out.update(parse_kb_fields(_pread_all(self._rollup), _ROLLUP))
        return out


def _pread_all(fd: int, size: int = 16384) -> bytes:
    """The whole of a small /proc file: one read, since each read of smaps_rollup
    walks the page tables again; more only if the buffer came back full."""
    data = os.pread(fd, size, 0)
    while len(data) == size:
        size *= 4
        data = os.pread(fd, size, 0)
    return data


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("smaps", SmapsProbe)
