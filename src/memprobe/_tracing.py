"""tracemalloc as a shared service: probes acquire and release tracing, memprobe stops
only what it started.

tracemalloc is process-wide, so every probe that needs it (the ``tracemalloc``
probe, its windowed mode, a third-party probe, ``check_leaks``) goes through
:func:`acquire_tracing` and :func:`release_tracing`: the first user starts
tracing if nothing traces yet, the last one out stops it, and tracing someone
else started is never stopped. A forked child gets a fresh lock (the parent's
may have been held by a thread that does not exist in the child).
"""

from __future__ import annotations

import os
import threading
import tracemalloc

_lock = threading.Lock()
_users = 0
_started_by_memprobe = False
# Releases owed by users that were garbage-collected while another thread (or
# the collecting thread itself) held _lock; paid at the next acquire or release.
_owed: list[None] = []


def acquire_tracing(nframe: int) -> None:
    """Start tracing (``nframe`` frames) if nothing traces yet; count this user either way."""
    global _users, _started_by_memprobe
    with _lock:
        _pay_owed()
        if not tracemalloc.is_tracing():
            tracemalloc.start(nframe)
            _started_by_memprobe = True
        _users += 1


def release_tracing() -> None:
    """Stop tracing when the last memprobe user leaves, if memprobe started it."""
    with _lock:
        _release_locked()


def users() -> int:
    """How many memprobe users hold tracing now."""
    return _users


def started_by_memprobe() -> bool:
    """True while tracing runs because memprobe started it (so memprobe may reset its peak)."""
    return _started_by_memprobe


def _release_locked() -> None:
    global _users, _started_by_memprobe
    _users = max(0, _users - 1)
    if _users == 0 and _started_by_memprobe:
        tracemalloc.stop()
        _started_by_memprobe = False


def _pay_owed() -> None:
    while _owed:
        _owed.pop()
        _release_locked()


def release_collected() -> None:
    """Release for a user that was garbage-collected without releasing.

    A Prober nobody stops (RLlib has no hook at ``Algorithm.stop()``) must not
    keep tracing, and slowing every allocation, for the rest of the process.
    This may run inside a collection triggered while the lock is held, so it
    never waits for the lock: it releases now if it can, else at the next
    acquire or release.
    """
    lock = _lock
    if lock.acquire(blocking=False):
        try:
            _release_locked()
            _pay_owed()
        finally:
            lock.release()
    else:
        _owed.append(None)


def forget_stopped_tracing() -> None:
    """Someone else stopped the tracing memprobe started: memprobe must not stop
    theirs later, if they start it again."""
    global _started_by_memprobe
    with _lock:
        if not tracemalloc.is_tracing():
            _started_by_memprobe = False


def _renew_after_fork() -> None:
    """In a forked child: a fresh lock, since the forking thread is the only one left."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_after_fork)
