"""``process``: this process's memory, file descriptors and threads."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from .._errors import ConfigError, show
from .._keptfd import fstat_or_none, identity, same_file
from .._pid import current_pid, getpid
from ..hookspecs import hookimpl
from ..metrics import Metric

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """This process's resident size now, in bytes (0 where it cannot be read): one
    read of ``/proc/self/statm`` on Linux, else psutil."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except Exception:  # no reading
            return 0


_perf_counter = time.perf_counter

#: The metrics of a row read from ``/proc``, in the order ``sample()`` gives them.
_COLUMNS = ("data_bytes", "num_fds", "num_threads", "rss_bytes", "shared_bytes", "vms_bytes")
_COLUMNS_NO_FDS = tuple(c for c in _COLUMNS if c != "num_fds")

#: The default ``count_max_age_seconds``: fds and threads are re-counted when the
#: last count is older than this (100 µs). A loop that samples less often than
#: 10,000 times a second gets a fresh count in every sample.
DEFAULT_COUNT_MAX_AGE_SECONDS = 1e-4


def _open_fd_counter(fd_dir: str) -> int:
    """A kept fd on ``/proc/<pid>/fd`` whose ``st_size`` is the fd count, or -1.

    Linux 6.2+ reports the number of open fds as the size of that directory
    (one ``fstat`` instead of a ``listdir``). Older kernels report 0; then
    this returns -1 and ``listdir`` is used.
    """
    try:
        fd = os.open(fd_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return -1
    try:
        size = os.fstat(fd).st_size
        # listdir also sees our fd plus its own temporary one: one more than st_size.
        if size > 0 and size == len(os.listdir(fd_dir)) - 1:
            return fd
    except OSError:
        pass
    os.close(fd)
    return -1


class ProcessProbe:
    """Process memory (RSS, VMS, shared, data), open file descriptors and threads.

    On Linux it reads ``/proc/self/statm`` through a kept file descriptor
    and counts fds with one ``fstat`` of
    ``/proc/self/fd`` (Linux 6.2+; ``listdir`` before) and threads with one
    of ``/proc/self/task``; elsewhere it uses one reused
    ``psutil.Process``. ``full=True`` adds USS/PSS/swap from
    ``memory_full_info()``, which reads smaps (milliseconds: docs/performance.md).

    ``num_fds`` and ``num_threads`` are counted again only when the last count
    is older than ``count_max_age_seconds`` (default 100 µs): a sample's counts
    are those of at most that long ago. Counting them is half the probe's cost,
    and only a loop sampling more than 10,000 times a second reuses a count; in
    such a loop a leak of one fd per step still reads as one fd per step, as a
    staircase. ``count_max_age_seconds=0`` counts in every sample.
    """

    metrics = {
        "rss_bytes": Metric("resident set size", "bytes", judged=True),
        "vms_bytes": Metric("virtual memory size", "bytes", judged=True),
        "shared_bytes": Metric("resident shared pages (file-backed; Linux)", "bytes",
                               judged=True, growth="mmap"),
        "data_bytes": Metric("data + stack segment (Linux)", "bytes"),
        "num_fds": Metric("open file descriptors (POSIX)", "count", judged=True,
                          growth="fds"),
        "num_threads": Metric("OS threads of this process", "count", judged=True,
                              growth="threads"),
        "uss_bytes": Metric("unique set size (full=True)", "bytes", judged=True),
        "pss_bytes": Metric("proportional set size (full=True, Linux)", "bytes",
                            judged=True),
        "swap_bytes": Metric("swapped out (full=True, Linux)", "bytes"),
    }

    # Set before the options are checked, so that a probe refused by a bad option
    # has nothing to close when it is collected.
    _statm = _stat = _fd_dirfd = _task_fd = -1
    _proc: Any = None
    # (st_dev, st_ino) of each kept fd, checked before it is used (memprobe._keptfd)
    _statm_id = _stat_id = _fd_dir_id = _task_id = (-1, -1)

    def __init__(self, *, full: bool = False, fds: bool = True, pid: int | None = None,
                 count_max_age_seconds: float = DEFAULT_COUNT_MAX_AGE_SECONDS) -> None:
        if not isinstance(full, bool):
            raise ConfigError("process.full", f"must be a bool, got {show(full)}")
        if not isinstance(fds, bool):
            raise ConfigError("process.fds", f"must be a bool, got {show(fds)}")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
            raise ConfigError("process.pid", f"must be a positive int, got {show(pid)}")
        if (not isinstance(count_max_age_seconds, (int, float))
                or isinstance(count_max_age_seconds, bool)
                or not 0 <= count_max_age_seconds < float("inf")):
            raise ConfigError("process.count_max_age_seconds",
                              f"must be a finite number >= 0, got {show(count_max_age_seconds)}")
        self.full = full
        self.fds = fds
        self.count_max_age_seconds = float(count_max_age_seconds)
        # The last counts of threads and fds, and when they were taken (perf_counter).
        self._counted_at = float("-inf")
        self._threads = 0
        self._nfds = 0
        self.pid = pid
        self._proc: Any = None
        self._statm = -1
        self._stat = -1
        self._opened_in = -1
        self._fd_dir = ""
        self._task_fd = -1  # kept fd on /proc/<pid>/task: st_nlink - 2 is the thread count
        self._fd_dirfd = -1  # kept fd on /proc/<pid>/fd: fstat().st_size counts fds (Linux >= 6.2)

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        self._open()

    def stop(self) -> None:
        self._close()

    def _open(self) -> None:
        self._close()
        pid = self.pid or getpid()
        base = f"/proc/{pid}"
        if sys.platform.startswith("linux") and os.path.exists(f"{base}/statm"):
            self._statm = os.open(f"{base}/statm", os.O_RDONLY)
            self._stat = os.open(f"{base}/stat", os.O_RDONLY)
            self._fd_dir = f"{base}/fd"
            if self.fds:
                self._fd_dirfd = _open_fd_counter(self._fd_dir)
            self._task_fd = self._open_task_counter(f"{base}/task")
        if self._statm < 0 or self.full or not self.fds:
            import psutil

            self._proc = psutil.Process(pid)
        self._opened_in = current_pid()
        if self._statm >= 0:
            self._statm_id, self._stat_id = identity(self._statm), identity(self._stat)
        if self._fd_dirfd >= 0:
            self._fd_dir_id = identity(self._fd_dirfd)
        if self._task_fd >= 0:
            self._task_id = identity(self._task_fd)
        self._counted_at = float("-inf")  # the counts taken before belong to another process

    def _close(self) -> None:
        # Only the descriptors still on the files opened: a number the program reused
        # is the program's (a descriptor is checked when it is read, and stat's is
        # read only where the thread count has no kept fd).
        for fd, ident in ((self._statm, self._statm_id), (self._stat, self._stat_id),
                          (self._fd_dirfd, self._fd_dir_id), (self._task_fd, self._task_id)):
            if fd >= 0 and same_file(fd, ident):
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._statm = self._stat = self._fd_dirfd = self._task_fd = -1
        self._proc = None

    def __del__(self) -> None:
        self._close()

    def __getstate__(self) -> dict[str, Any]:  # kept fds and psutil objects do not pickle
        state = self.__dict__.copy()
        state.update(_proc=None, _statm=-1, _stat=-1, _fd_dirfd=-1, _task_fd=-1, _opened_in=-1)
        return state

    # -- sampling ----------------------------------------------------------
    def sample(self) -> tuple[int, ...] | dict[str, int]:
        """A row of :attr:`columns` where ``/proc`` is read (Linux, without ``full``),
        else a flat mapping."""
        if self._opened_in != current_pid():  # started lazily, or forked since
            self._opened_in = -1
            # the parent's fds: do not close them
            self._statm = self._stat = self._fd_dirfd = self._task_fd = -1
            self._open()
        elif self._statm >= 0 and not same_file(self._statm, self._statm_id):
            self._lost_kept_fds()  # the program closed or reused it: never touch it again
        if self._statm >= 0 and not self.full:
            return self._sample_proc()
        out = self._sample_psutil() if self._statm < 0 else dict(
            zip(self.columns, self._sample_proc()))
        if self.full:
            info = self._proc.memory_full_info()
            out["uss_bytes"] = info.uss
            if hasattr(info, "pss"):
                out["pss_bytes"] = info.pss
                out["swap_bytes"] = info.swap
        return out

    @property
    def columns(self) -> tuple[str, ...]:
        """The metrics of a row that ``sample()`` returns, in its order."""
        return _COLUMNS if self.fds else _COLUMNS_NO_FDS

    def _lost_kept_fds(self) -> None:
        """The program closed or reused a descriptor the probe kept: forget them all
        (their numbers are the program's now, never to be read or closed), open new
        ones, and drop this sample."""
        self._statm = self._stat = self._fd_dirfd = self._task_fd = -1
        self._open()
        raise OSError(f"the program closed or reused the file descriptors the probe "
                      f"kept on {os.path.dirname(self._fd_dir)}/statm and its "
                      "neighbours; it reopened them, and this sample is dropped")

    def _kept_fstat(self, fd: int, ident: tuple[int, int]) -> os.stat_result:
        """``os.fstat`` of a kept descriptor, which must still be on the file it was
        opened on (else :meth:`_lost_kept_fds`): the stat that counts is the check."""
        st = fstat_or_none(fd)
        if st is None or st.st_ino != ident[1] or st.st_dev != ident[0]:
            self._lost_kept_fds()
        return st  # type: ignore[return-value]

    def _sample_proc(self) -> tuple[int, ...]:
        f = os.pread(self._statm, 256, 0).split()  # statm: checked by sample()
        now = _perf_counter()
        if now - self._counted_at >= self.count_max_age_seconds:
            # Each descriptor read below is checked by the fstat that reads it.
            if self._task_fd >= 0:
                self._threads = self._kept_fstat(self._task_fd, self._task_id).st_nlink - 2
            else:
                self._kept_fstat(self._stat, self._stat_id)
                self._threads = self._threads_from_stat()
            if self.fds:
                if self._fd_dirfd >= 0:
                    # The kept directory fd is counted here; listdir() would count
                    # its own temporary fd instead, so both give the same number.
                    self._nfds = self._kept_fstat(self._fd_dirfd, self._fd_dir_id).st_size
                else:
                    self._nfds = len(os.listdir(self._fd_dir))
            self._counted_at = now
        # statm: size resident shared text lib data dt, in pages; the order of _COLUMNS
        if self.fds:
            return (int(f[5]) * _PAGE, self._nfds, self._threads, int(f[1]) * _PAGE,
                    int(f[2]) * _PAGE, int(f[0]) * _PAGE)
        return (int(f[5]) * _PAGE, self._threads, int(f[1]) * _PAGE, int(f[2]) * _PAGE,
                int(f[0]) * _PAGE)

    def _threads_from_stat(self) -> int:
        stat = os.pread(self._stat, 1024, 0)
        # fields after the command name, which is in parentheses and may contain spaces
        rest = stat[stat.rindex(b")") + 2 :].split()
        return int(rest[17])

    def _open_task_counter(self, task_dir: str) -> int:
        """A kept fd on ``/proc/<pid>/task`` (one subdirectory per thread), or -1.

        Its link count is the thread count + 2 (one ``fstat`` instead of
        reading and parsing ``/proc/<pid>/stat``); checked against ``stat``
        once, else ``stat`` is used.
        """
        try:
            fd = os.open(task_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return -1
        try:
            if os.fstat(fd).st_nlink - 2 == self._threads_from_stat() > 0:
                return fd
        except (OSError, ValueError, IndexError):
            pass
        os.close(fd)
        return -1

    def _sample_psutil(self) -> dict[str, int]:
        p = self._proc
        with p.oneshot():
            mi = p.memory_info()
            out = {"rss_bytes": mi.rss, "vms_bytes": mi.vms}
            for name in ("shared", "data"):
                if hasattr(mi, name):
                    out[f"{name}_bytes"] = getattr(mi, name)
            out["num_threads"] = p.num_threads()
            if self.fds and hasattr(p, "num_fds"):
                out["num_fds"] = p.num_fds()
        return out


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("process", ProcessProbe)
