"""Numbers and text for people: values in their unit, file content made safe to print.

Everything a report shows that came from a file (tags, the command, metric
and site keys, notes, file names) goes through :func:`safe` before it reaches
a terminal: a JSONL file from elsewhere must not be able to move the cursor,
clear the screen or write the clipboard (OSC 52) of the person reading it.
"""

from __future__ import annotations

import math

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


def fmt_seconds(s: float) -> str:
    """A duration: ``7.0 µs``, ``2.44 ms``, ``1.20 s``."""
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
