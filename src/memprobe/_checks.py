"""Checking one option's value: each check returns the value as its type, or raises
:class:`memprobe.ConfigError` naming the option at fault and saying what it must be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._errors import ConfigError, did_you_mean, show

__all__ = ["INT_OPTION_MAX", "MAX_REPEATS", "check_bool", "check_fraction", "check_int", "check_limit",
           "check_seconds", "hint"]

#: The largest int option (a ring buffer's length must fit a C ssize_t).
INT_OPTION_MAX = 2**62
#: The most repeats a leak check runs (``check_leaks``, ``assert_no_leak``, the pytest
#: marker): its columns are allocated up front (8 bytes per repeat and metric), and
#: more calls than this judge nothing better.
MAX_REPEATS = 100_000


def hint(name: str, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` with the closest of ``known`` to ``name``, or ``""``."""
    text = did_you_mean(name, known)
    return f"; {text}" if text else ""


def check_int(option: str, value: Any, minimum: int) -> int:
    """An int option >= ``minimum`` (bools refused)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(option, f"must be an int >= {minimum}, got {show(value)}")
    if value > INT_OPTION_MAX:
        raise ConfigError(option, f"must be at most {INT_OPTION_MAX}, got {show(value)}")
    return value


def _as_float(option: str, value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(option, "is too large to be a number of seconds") from None


def check_seconds(option: str, value: Any) -> float:
    """A number of seconds >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(option, f"must be a number of seconds >= 0, got {show(value)}")
    return _as_float(option, value)


def check_limit(option: str, value: Any) -> float:
    """A time limit: a finite number of seconds > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(option, f"must be a number of seconds > 0, got {show(value)}")
    if value == float("inf"):
        raise ConfigError(option, "must be finite; leave it out for no limit")
    return _as_float(option, value)


def check_bool(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(option, f"must be a bool, got {show(value)}")
    return value


def check_fraction(option: str, value: Any) -> float:
    """A fraction in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(option, f"must be a fraction in (0, 1], got {show(value)}")
    return float(value)
