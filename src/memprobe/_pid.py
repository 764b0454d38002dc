"""This process's id without a system call per read, and ``os.getpid`` as it was at import.

``os.getpid()`` is a system call on Linux (glibc does not cache it), and
a sample asks for it. The value is renewed in a forked child by
``os.register_at_fork``, which runs for ``os.fork()`` and for any fork made
through ``PyOS_AfterFork_Child`` (multiprocessing's fork start method among them).

:func:`getpid` is ``os.getpid`` bound when memprobe is imported: a program that
patches ``os.getpid`` (``os.getpid = lambda: 1``, in a test) does not make
memprobe think it runs in a forked child, which writes nothing.
"""

from __future__ import annotations

import os

__all__ = ["current_pid", "getpid"]

#: ``os.getpid``, bound at import (whatever the program later assigns to ``os.getpid``).
getpid = os.getpid

_current = [getpid()]


def current_pid() -> int:
    """``os.getpid()``, read from a value renewed after each fork."""
    return _current[0]


def _renew_after_fork() -> None:
    _current[0] = getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_after_fork)
