"""The pytest plugin, run by pytester on real leaking and clean tests: the marker,
--memprobe-leaks, the ini default, the session summary, and pytest-xdist."""

from __future__ import annotations

import pytest

# What the plugin imports when it judges a test, imported before any inline run:
# pytester restores sys.modules after each run, and a memprobe module first imported
# inside one would be imported again later, with classes that are not the first's.
import memprobe.leak._alarm
import memprobe.leak._peak
import memprobe.leaks
import memprobe.probes.memray  # noqa: F401

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
    result.stdout.fnmatch_lines(["*memprobe.LeakError: tracemalloc/filtered_bytes grew *",
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
    result.stdout.fnmatch_lines(["*memprobe.LeakError: tracemalloc/filtered_bytes grew *"])
    assert "FAILED test_memprobe_leaks_loops_unmarked_tests.py::test_leaks_unmarked" in (
        result.stdout.str())
    # Without the option the same tests are not judged.
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert "= memprobe =" not in result.stdout.str()


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
    result.stderr.fnmatch_lines(["*memprobe_max_growth_bytes: must be a size*"])


def _assert_summary(out: str, name: str) -> None:
    assert "= memprobe =" in out
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
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_x: memprobe_leak_check: max_growth_bytes: must be a size*"
                                 "got 'lots'"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("options, fault", [
    ('repeats="abc"', "repeats: must be an int from 3 to 100000, got 'abc'"),
    ("repeats=10**8", "repeats: must be an int from 3 to 100000, got 100000000"),
    ("repeats=2", "repeats: must be an int from 3 to 100000, got 2"),
    ("metrics=[1, None]", "metrics: must be a non-empty list of metric names"),
    ('metrics="process/rss_bytes"', "metrics: must be a non-empty list of metric names"),
    ("repeats=10, warmup=10", "warmup: 10 warm-up calls of 10 repeats leave 0 to judge"),
    ('warmup="soon"', "warmup: must be an int from 0 to 99999, got 'soon'"),
    ("probes=[None]", "probes: must be a list of probe names"),
    ('max_growth_bytes="-1 KB"', "max_growth_bytes: must be a size"),
])
def test_hostile_marker_options_are_a_usage_error_naming_the_option(
        pytester: pytest.Pytester, options: str, fault: str) -> None:
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.memprobe_leak_check({options})
        def test_hostile():
            pass
        """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"::test_hostile: memprobe_leak_check: {fault}" in err, err
    assert "Traceback" not in err + result.stdout.str()


PEAK = """
import time
import pytest

@pytest.mark.memprobe_limit_peak("1 MiB")
def test_needs_5_mib_briefly():
    held = [bytes(1000) for _ in range(5000)]
    time.sleep(0.05)
    del held

@pytest.mark.memprobe_limit_peak(limit="16 MB")
def test_fits():
    held = [bytes(1000) for _ in range(500)]
    del held
"""


def test_peak_limit_fails_with_the_sites_that_held_the_peak(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PEAK)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    head = next(line for line in out.splitlines() if line.startswith("memprobe.PeakError: "))
    assert "traced memory peaked +4." in head or "traced memory peaked +5." in head, head
    assert head.endswith("above the start, over the limit of 1.0 MiB"), head
    sites = out.split("top allocating sites when it was highest:")[1].splitlines()
    assert sites[1].strip().startswith("test_peak_limit_fails_with_the_sites_that_held_the_peak"
                                       ".py:6: +"), sites
    summary = out.split("= memprobe =")[1]
    assert "2 test(s) judged, 0 leaking, 1 over their peak limit" in summary
    assert f"PEAK test_peak_limit_fails_with_the_sites_that_held_the_peak.py::" \
           f"test_needs_5_mib_briefly: {head[len('memprobe.PeakError: '):]}" in summary


def test_a_bad_peak_limit_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.memprobe_limit_peak("24 MiBs")
        def test_x():
            pass
        """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*::test_x: memprobe_limit_peak: limit: must be a size*"
                                 "got '24 MiBs'"])


def test_failure_headline_and_summary_name_one_metric_in_one_wording(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    out = pytester.runpytest("-p", "no:cacheprovider").stdout.str()
    failure = next(line for line in out.splitlines() if line.startswith("memprobe.LeakError: "))
    headline = failure[len("memprobe.LeakError: "):].split("; tolerated")[0]
    assert headline.startswith("tracemalloc/filtered_bytes grew +") and " per call)" in headline
    leak = next(line for line in out.splitlines() if line.startswith("LEAK "))
    assert leak == (f"LEAK test_failure_headline_and_summary_name_one_metric_in_one_wording.py::"
                    f"test_leaks: {headline}, culprit "
                    f"test_failure_headline_and_summary_name_one_metric_in_one_wording.py:12")


def test_top_and_frames_from_the_command_line_and_the_ini(pytester: pytest.Pytester) -> None:
    # 60 calls: B's 10 KB per call passes the floor of 0.01% of the resident size in a
    # pytest worker of 3 GiB (330 KB; 25 calls made 230 KB).
    pytester.makepyfile("""
        import tracemalloc
        import pytest
        A, B = [], []

        @pytest.mark.memprobe_leak_check(repeats=60, max_growth_bytes="1 KB", warmup=2)
        def test_two_culprits():
            A.append(bytes(20_000))
            B.append(bytes(10_000))

        @pytest.mark.memprobe_leak_check(repeats=5, warmup=1)
        def test_frames():
            assert tracemalloc.get_traceback_limit() == FRAMES
        """.replace("FRAMES", "int(__import__('os').environ['FRAMES'])"))
    pytester.makeini("[pytest]\nmemprobe_top = 1\nmemprobe_frames = 7\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FRAMES", "7")
        out = pytester.runpytest("-p", "no:cacheprovider").stdout.str()
        culprits = out.split("culprits, fastest-growing first (top 1):\n")[1].splitlines()
        assert culprits[0].strip().endswith(".py:7: +19.6 KiB per call"), culprits
        assert not culprits[1].startswith("  "), culprits  # one site listed
        assert "1 passed" in out
        mp.setenv("FRAMES", "3")
        out = pytester.runpytest("-p", "no:cacheprovider", "--memprobe-top=2",
                                 "--memprobe-frames=3").stdout.str()
        culprits = out.split("culprits, fastest-growing first (top 2):\n")[1].splitlines()
        assert culprits[1].strip().endswith(".py:8: +9.8 KiB per call"), culprits
        assert "1 passed" in out
    result = pytester.runpytest("-p", "no:cacheprovider", "--memprobe-frames=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--memprobe-frames: must be an int from 1 to 1000, got 0*"])


ALLOW = """
import pytest
CACHE = []
OTHER = []

def remember(x):
    CACHE.append(x)

@pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
def test_known_cache():
    remember(bytes(20_000))

@pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
def test_known_cache_and_a_leak():
    remember(bytes(20_000))
    OTHER.append(bytes(20_000))
"""


def test_allowed_culprits_are_reported_but_do_not_fail(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_allow=ALLOW)
    result = pytester.runpytest("-p", "no:cacheprovider", "--memprobe-allow=test_allow.py:10",
                                "--memprobe-allow=*_allow.py:14")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "  test_allow.py:14: +19.6 KiB per call  (allowed)" in out
    summary = out.split("= memprobe =")[1]
    assert "1 passing with allowed culprits" in summary
    assert "allowed test_allow.py::test_known_cache: tracemalloc/filtered_bytes grew" in summary
    assert "allowed culprits: test_allow.py:10" in summary
    assert "LEAK test_allow.py::test_known_cache_and_a_leak:" in summary
    assert "culprit test_allow.py:15" in summary
    pytester.makeini("[pytest]\nmemprobe_allow =\n    test_allow.py:10\n    *.py:1[45]\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_memprobe_off_keeps_the_markers_registered(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "--memprobe-off")
    result.assert_outcomes(passed=2)
    assert "= memprobe =" not in result.stdout.str()
    pytester.makepyfile(PEAK)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "--memprobe-off",
                                "--memprobe-leaks=5")
    result.assert_outcomes(passed=2)


UNITTEST = """
import unittest
import pytest
CACHE = []
SETUPS = []

class TestCases(unittest.TestCase):
    def setUp(self):
        SETUPS.append(1)

    @pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
    def test_leaks(self):
        CACHE.append(bytes(20_000))

    @pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
    def test_clean(self):
        data = [bytes(1000) for _ in range(50)]
        del data

    def test_set_up_once_per_test(self):
        self.assertEqual(len(SETUPS), 3)
"""


def test_unittest_testcase_methods_are_judged(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_cases=UNITTEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "FAILED test_cases.py::TestCases::test_leaks - memprobe.LeakError: " in out
    assert "culprit test_cases.py:12" in out.split("= memprobe =")[1]


ASYNC = """
import pytest

@pytest.mark.memprobe_leak_check(repeats=5)
async def test_async():
    pass
"""


def test_async_tests_are_refused_by_name_never_skipped_silently(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=ASYNC)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_a.py::test_async: memprobe_leak_check: an async test "
                                 "cannot be looped by memprobe*"])
    pytester.makepyfile(test_a="async def test_async():\n    pass\n\n"
                               "def test_sync():\n    pass\n")
    out = pytester.runpytest("-p", "no:cacheprovider", "--memprobe-leaks=10",
                             "-W", "ignore").stdout.str()
    summary = out.split("= memprobe =")[1]
    assert "1 test(s) judged, 0 leaking, 1 not judged" in summary
    assert "not judged test_a.py::test_async: an async test cannot be looped" in summary


def test_native_sites_of_a_failing_leak_check(pytester: pytest.Pytester) -> None:
    pytest.importorskip("memray")
    pytester.makepyfile(test_n=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--memprobe-native", "-k", "leaks")
    result.assert_outcomes(failed=1)
    native = result.stdout.str().split("native sites alive after 5 more calls (memray):\n")[1]
    assert native.splitlines()[0].strip().startswith("test_n.py:12"), native
