"""The pytest plugin, run by pytester on real leaking and clean tests: the marker,
--memprobe-leaks, the ini default, the session summary, and pytest-xdist."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest
CACHE = []
SETUPS = []

@pytest.fixture
def resource():
    SETUPS.append(1)
    return bytearray(10)

@pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
def test_leaks():
    CACHE.append(bytes(20_000))

@pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
def test_clean():
    data = [bytes(1000) for _ in range(50)]
    del data
"""

UNMARKED = """
import pytest
CACHE = []
SETUPS = []

@pytest.fixture
def resource():
    SETUPS.append(1)
    return bytearray(10)

def test_leaks_unmarked(resource):
    CACHE.append(bytes(20_000))

def test_clean_unmarked(resource):
    data = [bytes(1000) for _ in range(50)]
    del data

def test_fixture_set_up_once():
    assert len(SETUPS) == 2  # one per test above, however many times their bodies ran
"""


def test_marker_fails_leaking_test_and_passes_clean_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*memprobe.LeakError: memory keeps growing*",
                                 "*test_marker*.py:12*"])
    out = result.stdout.str()
    assert "memprobe._errors" not in out
    assert "def assert_no_leak" not in out and "check_leaks(" not in out  # no memprobe source
    assert len(out.split("memprobe.LeakError")[1].split("short test summary")[0]
               .splitlines()) < 20


def test_misspelt_marker_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memprobe_leak_check(repeat=10)
        def test_x():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*memprobe_leak_check: unknown option 'repeat'; did you mean 'repeats'?*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_memprobe_leaks_loops_unmarked_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(UNMARKED)
    pytester.makeini("[pytest]\nmemprobe_max_growth_bytes = 10000\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--memprobe-leaks=25")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*memprobe.LeakError: memory keeps growing*"])
    assert "FAILED test_memprobe_leaks_loops_unmarked_tests.py::test_leaks_unmarked" in (
        result.stdout.str())
    # Without the option the same tests are not judged.
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert "memprobe leak checks" not in result.stdout.str()


def test_ini_default_and_marker_override(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        CACHE = []

        @pytest.mark.memprobe_leak_check(repeats=25, warmup=2)
        def test_tolerated_by_the_ini():
            CACHE.append(bytes(20_000))

        @pytest.mark.memprobe_leak_check(repeats=25, warmup=2, max_growth_bytes=10_000)
        def test_marker_is_stricter():
            CACHE.append(bytes(20_000))
        """
    )
    pytester.makeini("[pytest]\nmemprobe_max_growth_bytes = 100_000_000\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    assert "FAILED test_ini_default_and_marker_override.py::test_marker_is_stricter" in (
        result.stdout.str())
    pytester.makeini("[pytest]\nmemprobe_max_growth_bytes = lots\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*memprobe_max_growth_bytes: must be a number of bytes*"])


def _assert_summary(out: str, name: str) -> None:
    assert "memprobe leak checks" in out
    assert "2 test(s) judged, 1 leaking" in out
    assert "worst growth: " in out and f"{name}.py::test_leaks" in out
    leak = next(line for line in out.splitlines() if line.startswith("LEAK "))
    assert f"{name}.py::test_leaks:" in leak and f"culprit {name}.py:12" in leak


def test_session_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    _assert_summary(result.stdout.str(), "test_session_summary")


def test_summary_under_xdist(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "2 workers" in out
    _assert_summary(out, "test_summary_under_xdist")


def test_a_bad_option_value_is_one_clean_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memprobe_leak_check(max_growth_bytes="lots")
        def test_x():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*memprobe.ConfigError: memprobe_leak_check: max_growth_bytes*"])
    assert "def check_leaks" not in result.stdout.str()
