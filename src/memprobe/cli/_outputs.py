"""Files the commands write: never an input, never half-written, never through a symlink.

An output is written to a temporary file in its own directory and renamed
into place when complete, so a failed or interrupted command leaves the old
file whole. An existing regular file is replaced (as ``cp`` and ``matplotlib``
do); an output that is the same file as an input or as the program being run
(same device and inode), a symlink, or an existing file that is not a regular
file (a FIFO, a device) is refused before anything is opened. A replaced file
keeps its mode. The temporary name is short whatever the output's name
(``.<name>.XXXXXXXX.tmp``, the name cut to :data:`MAX_TEMP_NAME_CHARS`), and a
temporary file that is being written is locked (``flock``), so that a second
command writing the same output can tell and refuse (:func:`claim`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Sequence

from .._errors import PathError


class OutputError(PathError):
    """An output path that would destroy an input or write through a symlink."""


def path_identity(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file at ``path`` (symlinks followed), or None."""
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
        ident = path_identity(path)
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


#: The output's name is cut to this in its temporary name (file names have 255 bytes).
MAX_TEMP_NAME_CHARS = 200


def _temp_prefix(path: str) -> str:
    """``.<name>.`` for ``path``'s temporary files; a long name is cut and given a hash, so
    the temporary name stays under 255 bytes and two long names keep distinct prefixes."""
    name = os.path.basename(path)
    raw = os.fsencode(name)
    if len(raw) > MAX_TEMP_NAME_CHARS:
        digest = hashlib.sha1(raw).hexdigest()[:8]
        name = raw[:MAX_TEMP_NAME_CHARS - 9].decode("utf-8", "ignore") + "~" + digest
    return f".{name}."


def temp_beside(path: str) -> str:
    """A new empty file in ``path``'s directory (created if missing), mode as ``open`` gives.

    :raises OutputError: naming ``path`` (not the temporary name) when it cannot be made.
    """
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(path, f"cannot be written: {exc.strerror or exc}") from None
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    return tmp


def claim(tmp: str, path: str) -> int:
    """Lock the temporary file ``tmp`` of ``path``, then refuse if another command holds
    the lock of a temporary file of the same output (it is writing ``path`` now).

    :returns: the fd holding the lock (open for reading: the samples can be copied
        from it if ``tmp`` is deleted); close it to release the lock.
    :raises OutputError: another live command writes ``path``.
    """
    fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        parent = os.path.dirname(tmp)
        mine = os.path.basename(tmp)
        pattern = re.compile(re.escape(_temp_prefix(path)) + r"[a-z0-9_]{8}\.tmp")
        for name in os.listdir(parent):
            if name == mine or not pattern.fullmatch(name):
                continue
            if _locked(os.path.join(parent, name)):
                raise OutputError(path, f"another memprobe command is writing it now (into "
                                  f"{name}); give another -o, or wait for it to end")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _locked(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def commit(tmp: str, path: str) -> None:
    """Rename the finished temporary file into place (atomic on one file system); a
    regular file replaced gives its mode (permission bits) to the new one."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
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
