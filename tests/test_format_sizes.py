"""The one size parser (``"64 KB"``, ``"1.5 MiB"``, bytes) and the amount formats, by their laws."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import memprobe
from memprobe._format import MAX_SIZE, SIZE_UNITS, fmt_interval, fmt_value, parse_size

UNITS = sorted(SIZE_UNITS)
sizes = st.integers(min_value=0, max_value=MAX_SIZE)
numbers = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(sizes)
def test_bytes_as_int_or_text_are_themselves(n: int) -> None:
    assert parse_size(n, "x") == n
    assert parse_size(str(n), "x") == n
    assert parse_size(f"{n} B", "x") == n


@given(numbers, st.sampled_from(UNITS), st.sampled_from(["", " ", "  "]))
def test_a_number_and_a_unit_is_their_product_in_any_case_and_spacing(
        x: float, unit: str, space: str) -> None:
    text = f"{x!r}{space}{unit}"
    expected = round(Decimal(repr(x)) * SIZE_UNITS[unit])  # exact, as written
    assume(expected <= MAX_SIZE)
    assert parse_size(text, "x") == expected
    assert parse_size(f"  {text.upper()}  ", "x") == expected
    assert parse_size("+" + text, "x") == expected


@given(st.integers(0, 10**6), st.sampled_from(["kb", "KiB", "k"]))
def test_kb_and_kib_are_1024_bytes_like_pytest_memray(n: int, unit: str) -> None:
    assert parse_size(f"{n} {unit}", "x") == n * 1024


@given(sizes)
def test_what_reports_print_reads_back_within_its_rounding(n: int) -> None:
    shown = fmt_value(n, "bytes")  # "1.5 MiB": one decimal, so at most 5% off
    assert math.isclose(parse_size(shown, "x"), n, rel_tol=0.05, abs_tol=1)


@given(numbers, numbers, st.sampled_from(UNITS))
def test_parse_size_is_monotonic(a: float, b: float, unit: str) -> None:
    lo, hi = sorted((a, b))
    assume(hi * SIZE_UNITS[unit] <= MAX_SIZE)
    assert parse_size(f"{lo!r} {unit}", "x") <= parse_size(f"{hi!r} {unit}", "x")


@pytest.mark.parametrize("bad", ["", "lots", "-1", "-1 KB", "1 KBB", "1 XB", "nan", "inf",
                                 "1e400", "1 2", True, None, [64], float("nan"), -5,
                                 float("inf"), 2 * MAX_SIZE, "1_"])
def test_anything_else_is_an_error_naming_the_option(bad: object) -> None:
    with pytest.raises(memprobe.ConfigError, match=r"^limit: must be a size") as info:
        parse_size(bad, "limit")
    assert info.value.option == "limit"


def test_digit_groups_and_exponents() -> None:
    assert parse_size("100_000", "x") == 100_000
    assert parse_size("1e3", "x") == 1000
    assert parse_size("1.5 MiB", "x") == 1572864
    assert parse_size(".5k", "x") == 512


@given(st.floats(-2**40, 2**40, allow_nan=False), st.floats(-2**40, 2**40, allow_nan=False))
def test_an_interval_writes_its_unit_once_chosen_by_the_larger_end(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    text = fmt_interval(lo, hi, "bytes")
    left, _, right = text.partition(" to ")
    assert " " not in left and right.count(" ") == 1
    unit = right.split(" ")[1]
    assert unit == (fmt_value(max(abs(lo), abs(hi)), "bytes").split(" ")[1])


def test_the_verdict_line_reads_like_a_person_wrote_it() -> None:
    xs = list(range(60))
    v = memprobe.analyze(xs, [20e6 + 1.15 * 2**20 * x + (x % 3) * 1000 for x in xs],
                         key="process/rss_bytes", times=[140.0 * x for x in xs],
                         step="episode")
    assert v.describe() == ("process/rss_bytes: leak, +1.1 MiB per episode (+29.6 MiB/hour), "
                            "95% interval +1.1 to +1.2 MiB, over 60 episodes (warm-up 0)")
    assert memprobe.format_value(1.15 * 2**20, "bytes", signed=True) == "+1.1 MiB"
