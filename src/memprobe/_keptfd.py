"""File descriptors kept open inside a program that may close them and reuse their numbers.

A program may close every descriptor it did not open (``os.closerange(3, 4096)``,
as daemons and some test runners do) and then open its own files, which get
the same numbers. A descriptor memprobe kept open then refers to the
program's file: writing to it would write samples into that file, reading it
would read that file's bytes as memory figures. So memprobe records the
device and inode of each descriptor it keeps, and checks them (one
``fstat``, well under a microsecond: ``benchmarks/kept_fd_check.py``) before
it uses the descriptor. A descriptor that fails the check is never used or
closed again: its number belongs to the program now.
"""

from __future__ import annotations

import os

__all__ = ["all_same", "fstat_or_none", "identity", "same_file"]


def identity(fd: int) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of the open file ``fd``."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def fstat_or_none(fd: int) -> os.stat_result | None:
    """``os.fstat(fd)``, or None when ``fd`` is not open."""
    try:
        return os.fstat(fd)
    except (OSError, ValueError, OverflowError):
        return None


def same_file(fd: int, ident: tuple[int, int]) -> bool:
    """Whether ``fd`` is open and still refers to the file whose identity is ``ident``."""
    try:
        st = os.fstat(fd)
    except (OSError, ValueError, OverflowError):
        return False
    return st.st_ino == ident[1] and st.st_dev == ident[0]


def all_same(kept: tuple[tuple[int, int, int], ...]) -> bool:
    """Whether each ``(fd, st_dev, st_ino)`` of ``kept`` is open on that same file."""
    for fd, dev, ino in kept:
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        if st.st_ino != ino or st.st_dev != dev:
            return False
    return True
