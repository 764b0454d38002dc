"""Files the commands write: never an input, never half-written, never through a symlink.

An output is written to a temporary file in its own directory and renamed
into place when complete, so a failed or interrupted command leaves the old
file whole. An existing regular file is replaced (as ``cp`` and ``matplotlib``
do); an output that is the same file as an input or as the program being run
(same device and inode), a symlink, or an existing file that is not a regular
file (a FIFO, a device) is refused before anything is opened.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence

from ._errors import PathError


class OutputError(PathError):
    """An output path that would destroy an input or write through a symlink."""


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_outputs(outputs: Sequence[tuple[str, str]], inputs: Sequence[tuple[str, str]]) -> None:
    """Refuse an output that is an input, another output, a symlink or not a regular file.

    :param outputs: ``(option, path)`` pairs, e.g. ``("--html", "r.html")``.
    :param inputs: ``(what, path)`` pairs, e.g. ``("input", "run.jsonl")``.
    :raises OutputError: naming the path and the reason.
    """
    seen: dict[tuple[int, int], str] = {}
    for what, path in inputs:
        ident = _identity(path)
        if ident is not None:
            seen.setdefault(ident, what)
    outs: dict[str, str] = {}
    for option, path in outputs:
        real = os.path.abspath(path)
        if real in outs:
            raise OutputError(path, f"given to both {outs[real]} and {option}")
        outs[real] = option
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise OutputError(path, f"cannot be checked: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(path, f"{option} is a symbolic link; give the path of its "
                              "target (memprobe does not write through symlinks)")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(path, f"{option} exists and is not a regular file")
        same = seen.get((st.st_dev, st.st_ino))
        if same is not None:
            raise OutputError(path, f"{option} is the same file as the {same}; "
                              "refusing to overwrite it")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_beside(path: str) -> str:
    """A new empty file in ``path``'s directory (created if missing), mode as ``open`` gives.

    :raises OutputError: naming ``path`` (not the temporary name) when it cannot be made.
    """
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                   dir=parent)
    except OSError as exc:
        raise OutputError(path, f"cannot be written: {exc.strerror or exc}") from None
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    return tmp


def commit(tmp: str, path: str) -> None:
    """Rename the finished temporary file into place (atomic on one file system)."""
    os.replace(tmp, path)


def discard(tmp: str) -> None:
    """Remove a temporary file that will not be committed."""
    try:
        os.unlink(tmp)
    except OSError:
        pass


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    tmp = temp_beside(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        commit(tmp, path)
    except BaseException:
        discard(tmp)
        raise
