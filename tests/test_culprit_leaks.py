"""Regression tests for issue 24 in the leak checks: code without a file is the user's,
and an explicit tolerance means what it says. Real programs, run for real."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import memprobe
from memprobe import ConfigError, LeakError

_LEAKY_C = textwrap.dedent("""
    import memprobe
    keep = []
    def leaky():
        keep.append(bytearray(16384))
    try:
        memprobe.assert_no_leak(leaky)
    except memprobe.LeakError as exc:
        print("LEAK", exc)
    else:
        print("PASSED")
""")


def test_python_c_code_is_the_users_and_its_leak_fails() -> None:
    """``python -c``: the allocations of code compiled as ``<string>`` are the user's."""
    out = subprocess.run([sys.executable, "-c", _LEAKY_C], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("LEAK"), out.stdout
    assert "string:5" in out.stdout  # keys drop the brackets


def test_python_c_code_through_a_library_is_named_without_a_missing_frame_note() -> None:
    """``python -c`` keeping what ``json.loads`` builds: the site reads ``string:N → json/...``
    (the key drops the brackets of ``<string>``), and ``string`` is not taken for the
    standard library's module, so no note says the user's frame was not reached."""
    src = _LEAKY_C.replace("bytearray(16384)", "json.loads(DOC)").replace(
        "import memprobe", "import json, memprobe\nDOC = json.dumps(list(range(500)))")
    out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.startswith("LEAK"), (out.stdout, out.stderr)
    assert "string:6 → json/decoder.py:" in out.stdout, out.stdout
    assert "no frame of the user's code" not in out.stdout, out.stdout


def test_stdin_code_is_the_users_and_its_leak_fails() -> None:
    out = subprocess.run([sys.executable, "-"], input=_LEAKY_C, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith("LEAK"), (out.stdout, out.stderr)
    assert "stdin:5" in out.stdout


def test_notebook_cell_through_numpy_names_the_cell() -> None:
    """A cell compiled as IPython names it, then calls numpy: cell line first."""
    pytest.importorskip("numpy")
    ns: dict = {}
    src = "import numpy as np\nkeep = []\ndef leaky():\n    keep.append(np.ones(2048))\n"
    exec(compile(src, "<ipython-input-3-5e2a1b>", "exec"), ns)
    with pytest.raises(LeakError) as info:
        memprobe.assert_no_leak(ns["leaky"], repeats=30)
    culprits = info.value.report.culprits
    assert culprits and culprits[0].startswith("ipython-input-3-5e2a1b:4 → numpy/"), culprits


def test_growth_over_the_tolerance_fails_even_below_the_slight_floor() -> None:
    """300 B per call for 35 calls judged is ~12 KB: under the 16 KiB floor for "slight",
    over the 5000 bytes the test tolerates."""
    keep = []

    def leaky() -> None:
        keep.append(bytearray(300))

    with pytest.raises(LeakError) as info:
        memprobe.assert_no_leak(leaky, repeats=40, max_growth_bytes=5000)
    v = info.value.report.get("tracemalloc/filtered_bytes")
    assert v is not None and v.leaking and v.growth > 5000
    assert "tolerated: 5000 bytes" in str(info.value)


def test_growth_within_the_tolerance_passes() -> None:
    keep = []

    def leaky() -> None:
        keep.append(bytearray(300))

    report = memprobe.assert_no_leak(leaky, repeats=40, max_growth_bytes=200_000)
    assert not report.get("tracemalloc/filtered_bytes").leaking


@pytest.mark.parametrize("warmup,repeats", [(30, 30), (29, 30), (31, 30), (28, 30)])
def test_warmup_that_leaves_too_few_calls_is_refused(warmup: int, repeats: int) -> None:
    with pytest.raises(ConfigError, match=r"warmup.*leave .* calls to judge"):
        memprobe.assert_no_leak(lambda: None, repeats=repeats, warmup=warmup,
                                max_growth_bytes=0)
    with pytest.raises(ConfigError, match="warmup"):
        memprobe.check_leaks(lambda: None, repeats=repeats, warmup=warmup)


pytest_plugins = ["pytester"]

MARKED = """
import numpy as np
import pytest
KEPT = []

@pytest.mark.memprobe_leak_check(repeats=40, max_growth_bytes=5000)
def test_slow_numpy_leak():
    KEPT.append(np.ones(32))  # about 350 B per call: 12 KB judged, under the 16 KiB floor
"""

WARMUP_EATS_ALL = """
import pytest
KEPT = []

@pytest.mark.memprobe_leak_check(repeats=30, warmup=30, max_growth_bytes=0)
def test_warmup_eats_every_call():
    KEPT.append(bytearray(2_000_000))
"""


def test_the_marker_honours_its_tolerance_and_names_the_users_line(
        pytester: pytest.Pytester) -> None:
    pytest.importorskip("numpy")
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "test_the_marker_honours_its_tolerance_and_names_the_users_line.py:7 → numpy/" in out


def test_the_marker_refuses_a_warmup_that_eats_every_call(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WARMUP_EATS_ALL)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_warmup_eats_every_call: memprobe_leak_check: warmup: "
                                 "30 warm-up calls of 30 repeats leave 0 to judge; give at most 27*"])


_KEPT_PATTERNS = textwrap.dedent("""
    import itertools, json, re, memprobe
    count = itertools.count()
    keep = []
    def patterns():
        keep.append(re.compile(rf"s{next(count)}_(\\d+)_[a-z]{{3}}" * 8))
    r = memprobe.check_leaks(patterns, repeats=40,
                             probes=["process", "tracemalloc", "malloc"])
    print(json.dumps([r.kind, r.culprits[:2], {v.metric: v.kind for v in r.leaking}]))
""")


def test_a_librarys_kept_objects_are_python_at_the_users_line() -> None:
    """Kept ``re.Pattern`` objects, built inside ``re.compile``: Python allocations at
    the user's line, with malloc's bytes in use beside them (the patterns' larger
    blocks, and ``re``'s own cache filling)."""
    out = subprocess.run([sys.executable, "-c", _KEPT_PATTERNS], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json

    kind, culprits, by_metric = json.loads(out.stdout.strip().splitlines()[-1])
    assert kind == "python", (kind, culprits, by_metric)
    assert culprits[0] == "string:6 → re/_compiler.py:761", culprits
    assert by_metric.get("tracemalloc/filtered_bytes") == "python", by_metric
