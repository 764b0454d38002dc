"""memprobe's exceptions and warnings: one base class, structured attributes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def show(value: object) -> str:
    """``repr(value)`` for an error message, which must never fail to build.

    An int too large to print (Python refuses over 4,300 digits) is described
    by its size; a value whose ``repr()`` raises, by its type.
    """
    if isinstance(value, int) and value.bit_length() > 4096:
        return f"<int of {value.bit_length()} bits>"
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} object whose repr() failed>"


def did_you_mean(name: str, known: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """``"did you mean 'x'?"`` (``'x' or 'y'`` for ``n`` > 1) with the names of ``known``
    closest to ``name``, or ``""`` if none is close. The caller adds the punctuation."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=n, cutoff=cutoff)
    return f"did you mean {' or '.join(map(repr, close))}?" if close else ""


class MemprobeError(Exception):
    """Base class of every error memprobe raises."""


class ConfigError(MemprobeError, ValueError):
    """An option given to memprobe is wrong.

    ``option`` names the option at fault (for example ``"probes"`` or
    ``"tracemalloc.top"``), ``message`` says what is wrong with it.
    """

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        self.message = message
        super().__init__(option, message)

    def __str__(self) -> str:
        return f"{self.option}: {self.message}"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.option, self.message))


class ProbeError(MemprobeError):
    """A probe failed: ``probe`` names it, ``message`` says how."""

    def __init__(self, probe: str, message: str) -> None:
        self.probe = probe
        self.message = message
        super().__init__(probe, message)

    def __str__(self) -> str:
        return f"probe {self.probe!r}: {self.message}"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.probe, self.message))


class MetricValueError(MemprobeError, ValueError):
    """A metric value is not a finite number: ``key`` names the metric."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(key, message)

    def __str__(self) -> str:
        return f"metric {self.key!r}: {self.message}"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.key, self.message))


class KeyCollisionError(MemprobeError, ValueError):
    """Two different inputs sanitize to the same metric key.

    ``key`` is the flat key both would produce; ``sources`` the two original
    key paths, so the message can name both.
    """

    def __init__(self, key: str, sources: Sequence[str]) -> None:
        self.key = key
        self.sources = tuple(sources)
        super().__init__(key, self.sources)

    def __str__(self) -> str:
        a, b = self.sources
        return f"{a!r} and {b!r} both flatten to the key {self.key!r}"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.key, self.sources))


class PathError(MemprobeError):
    """A file at fault: ``path`` names it, ``message`` says how."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(path, message)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.path, self.message))


class JsonlReadError(PathError):
    """A JSONL file cannot be read at all (missing, a directory, unreadable): ``path`` names it."""


class MemprobeWarning(UserWarning):
    """Base class of memprobe's warnings (a probe failed, a plugin would not load)."""


class ProbeFailedWarning(MemprobeWarning):
    """A probe raised, timed out or returned bad values; it was isolated."""


class PluginWarning(MemprobeWarning):
    """A plugin could not be loaded or registered something twice."""


class LeakWarning(MemprobeWarning):
    """A Prober's leak alarm: a metric grows faster than its threshold."""


class LeakError(MemprobeError, AssertionError):
    """Memory kept growing over repeated calls (``memprobe.assert_no_leak``).

    ``report`` is the :class:`memprobe.leaks.Report` with every verdict.
    """

    def __init__(self, message: str, report: object = None) -> None:
        self.message = message
        self.report = report
        super().__init__(message)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.message, self.report))
