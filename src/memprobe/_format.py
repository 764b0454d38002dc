"""Numbers and text for people: values in their unit, sizes people write, file content
made safe to print.

One module owns the format of an amount: :func:`fmt_value` writes one
(``+1.1 MiB``), :func:`fmt_interval` a range in one unit (``+1.0 to +1.2 MiB``),
:func:`parse_size` reads the sizes people write (``"64 KB"``, ``"1.5 MiB"``,
``65536``).

Everything a report shows that came from a file (tags, the command, metric
and site keys, notes, file names) goes through :func:`safe` before it reaches
a terminal: a JSONL file from elsewhere must not be able to move the cursor,
clear the screen or write the clipboard (OSC 52) of the person reading it.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Values longer than this many characters are cut, with an ellipsis.
MAX_TEXT = 200

_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
#: C0 and C1 controls, DEL, line/paragraph separators and the bidirectional
#: overrides (which reorder what the terminal shows): shown as escapes.
_ESCAPES = {
    c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}")
    for c in (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *_BIDI)
}


def safe(text: object, limit: int | None = MAX_TEXT) -> str:
    """``text`` with every control character escaped (``\\x1b``), cut at ``limit`` characters."""
    s = str(text)
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.translate(_ESCAPES)


_BYTE_UNITS = (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30),
               ("MiB", 2**20), ("KiB", 2**10))


def fmt_value(v: float, unit: str, signed: bool = False) -> str:
    """A value in its unit: ``12.8 MiB``, ``+3``, ``1.5 ms``; huge values in ``%.3g``."""
    sign = "+" if signed and v > 0 else ""
    if not math.isfinite(v):
        return f"{sign}{v}"
    a = abs(v)
    if unit == "bytes":
        if a >= 2**70:
            return f"{sign}{v:.3g} B"
        for name, div in _BYTE_UNITS:
            if a >= div:
                return f"{sign}{v / div:.1f} {name}"
        return f"{sign}{v:.0f} B"
    if unit == "seconds" and 0 < a < 1:
        return f"{sign}{v * 1e3:.3g} ms" if a >= 1e-3 else f"{sign}{v * 1e6:.3g} µs"
    if unit == "fraction":
        return f"{sign}{v:.3g}"
    if float(v).is_integer() and a < 1e15:
        return f"{sign}{int(v)}"
    return f"{sign}{v:.4g}"


def _byte_scale(a: float) -> tuple[str, float]:
    for name, div in _BYTE_UNITS:
        if a >= div:
            return name, div
    return "B", 1


def fmt_interval(low: float, high: float, unit: str) -> str:
    """A range, signed, its unit written once and chosen by the larger end:
    ``+1.0 to +1.2 MiB``; ``-3 to +5`` for a count."""
    if unit != "bytes" or not (math.isfinite(low) and math.isfinite(high)):
        return f"{fmt_value(low, unit, True)} to {fmt_value(high, unit, True)}"
    name, div = _byte_scale(max(abs(low), abs(high)))
    digits = 0 if name == "B" else 1

    def one(v: float) -> str:
        return f"{'+' if v > 0 else ''}{v / div:.{digits}f}"

    return f"{one(low)} to {one(high)} {name}"


#: What a unit of a size multiplies: KB and KiB alike are 1024 bytes, as in
#: pytest-memray, so a limit copied from it means the same here.
SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20,
              "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40,
              "tib": 2**40, "p": 2**50, "pb": 2**50, "pib": 2**50, "eb": 2**60,
              "eib": 2**60}
#: The largest size accepted: far above any memory, far below float trouble.
MAX_SIZE = 2**60
_SIZE = re.compile(r"\s*\+?\s*((?:\d+(?:_\d+)*)?\.?\d+(?:_\d+)*(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*")


def parse_size(value: object, option: str) -> int:
    """Bytes from a size as people write it: ``65536``, ``"64 KB"``, ``"1.5 MiB"``, ``"2g"``.

    Units (any case): B, K/KB/KiB (1024), M/MB/MiB, G/GB/GiB, T/TB/TiB, P/PB/PiB, EB/EiB; a bare
    number is bytes; ``_`` may group digits. The result is rounded to whole bytes.

    :raises ConfigError: naming ``option``, for anything else (negative, not finite,
        an unknown unit, above 1 EiB).
    """
    from ._errors import ConfigError, show

    def bad(why: str = "") -> ConfigError:
        return ConfigError(option, f"must be a size: bytes (65536) or a number and a unit "
                           f"(64 KB, 1.5 MiB; KB = KiB = 1024 bytes){why}, got {show(value)}")

    if isinstance(value, bool):
        raise bad()
    if isinstance(value, int):
        number: Any = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise bad()
        number = value
    elif isinstance(value, str):
        m = _SIZE.fullmatch(value)
        if m is None or m.group(2).lower() not in SIZE_UNITS:
            raise bad()
        from decimal import Decimal, InvalidOperation

        try:  # exact: "9007199254740993" is that many bytes, not the nearest double
            number = Decimal(m.group(1).replace("_", "")) * SIZE_UNITS[m.group(2).lower()]
        except InvalidOperation:
            raise bad() from None
    else:
        raise bad()
    if number < 0:
        raise bad()
    if number > MAX_SIZE:
        raise bad(f" up to {MAX_SIZE} bytes")
    return round(number)


def format_value(v: float, unit: str, signed: bool = False) -> str:
    """A value in its unit as memprobe's reports write it: ``12.8 MiB``, ``+3``, ``1.5 ms``.

    :param unit: ``bytes`` (shown in B, KiB, MiB...), ``seconds``, ``count``,
        ``fraction`` or ``""``.
    :param signed: write ``+`` before a positive value.
    """
    return fmt_value(v, unit, signed)


def fmt_seconds(s: float) -> str:
    """A duration: ``7.0 µs``, ``2.44 ms``, ``1.20 s``."""
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
