"""Laws of what the reports print: safe() text and compact numbers, over any input."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from memprobe._format import MAX_TEXT, fmt_value, safe

FUZZ = settings(max_examples=500, deadline=None)


def _terminal_active(c: str) -> bool:
    """A character a terminal acts on instead of showing (or that reorders what it shows)."""
    return unicodedata.category(c) == "Cc" or c in "\u2028\u2029" or (
        0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 or c in "\u200e\u200f\u061c")


@FUZZ
@given(st.text())
def test_safe_output_has_no_control_characters_and_is_bounded(text: str) -> None:
    out = safe(text)
    assert not any(_terminal_active(c) for c in out)
    assert len(out) <= MAX_TEXT * 6  # each kept character escapes to at most \uXXXX


@FUZZ
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Zl", "Zp")),
               max_size=MAX_TEXT))
def test_safe_keeps_printable_text_as_it_is(text: str) -> None:
    assert safe(text) == text


@FUZZ
@given(st.text(min_size=MAX_TEXT + 1))
def test_safe_cuts_long_text_with_an_ellipsis(text: str) -> None:
    # Cut first (at a character, never inside an escape), then escaped.
    assert safe(text) == safe(text[: MAX_TEXT - 1], limit=None) + "…"


@FUZZ
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**63), 2**63),
       st.sampled_from(["bytes", "seconds", "count", "fraction", ""]), st.booleans())
def test_numbers_print_compactly(v: float, unit: str, signed: bool) -> None:
    out = fmt_value(v, unit, signed)
    assert len(out) <= 16, out
    if signed and v > 0:
        assert out.startswith("+")
