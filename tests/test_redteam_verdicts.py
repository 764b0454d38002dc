"""Third red-team round: verdicts that passed a leak (repeated steps, a misspelt
metric) and options that failed every test or had no cap (#39)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memprobe
import memprobe.leak._alarm
import memprobe.leak._peak
import memprobe.leaks
import memprobe.probes.memray  # noqa: F401
from memprobe.leak._scales import SAMPLE_ORDER_NOTE, steps_usable

# What the plugin imports when it judges a test is imported above, before any inline
# run (as in tests/test_pytest_plugin.py).
pytest_plugins = ["pytester"]


# 11: repeated steps
def test_a_constant_step_in_a_leaking_loop_is_judged_in_sample_order() -> None:
    p = memprobe.Prober(probes=["process"])
    keep = []
    for _ in range(40):
        keep.append(bytearray(2 * 2**20))
        keep[-1][::4096] = b"x" * len(keep[-1][::4096])  # touched: resident
        p.sample(step=0)
    v = p.report().get("process/rss_bytes")
    assert v is not None and v.status == "leak", v
    assert SAMPLE_ORDER_NOTE in v.note and v.step == "sample"
    assert "over the last 40 samples" in v.describe()


@pytest.mark.parametrize("step", [lambda i: 0, lambda i: i % 2, lambda i: 60 - i],
                         ids=["constant", "i%2", "backwards"])
def test_the_cli_judges_unusable_steps_in_sample_order(tmp_path: Path, step) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({
        "time": 1000.0 + i, "step": step(i), "pid": 7,
        "values": {"memprobe/process/rss_bytes": 1e8 + i * 7.5 * 2**20}}) + "\n"
        for i in range(60)))
    r = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "LEAK" in r.stdout and SAMPLE_ORDER_NOTE in r.stdout, r.stdout


def test_analyze_on_repeated_steps_is_never_ok() -> None:
    ys = [1e8 + i * 2**20 for i in range(60)]
    v = memprobe.analyze([0.0] * 60, ys)
    assert v.status == "leak" and SAMPLE_ORDER_NOTE in v.note


def test_steps_repeated_a_few_times_are_still_the_axis() -> None:
    xs = [float(i // 2) for i in range(60)]  # a mark beside each sample
    assert steps_usable(xs, 20)
    v = memprobe.analyze(xs, [1e8 + x * 2**20 for x in xs])
    assert v.status == "leak" and not v.note


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=80), st.integers(3, 40))
def test_steps_that_go_back_are_never_an_axis(xs: list[float], min_points: int) -> None:
    if any(b < a for a, b in zip(xs, xs[1:])):
        assert not steps_usable(xs, min_points)
    else:
        assert steps_usable(xs, min_points) == (len(set(xs)) >= min(min_points, len(xs)))


# 12: a misspelt metric
def _leaky() -> None:
    _HELD.append(bytearray(200_000))


_HELD: list[bytearray] = []


def test_assert_no_leak_refuses_a_misspelt_metric_with_a_did_you_mean() -> None:
    with pytest.raises(memprobe.ConfigError, match=r"metrics: no probe declares the metric "
                       r"'tracemalloc/filterd_bytes'; did you mean 'tracemalloc/filtered_bytes'"):
        memprobe.assert_no_leak(_leaky, metrics=["tracemalloc/filterd_bytes"], repeats=10)
    assert not _HELD  # refused before the first call


def test_assert_no_leak_takes_declared_names_and_patterns() -> None:
    report = memprobe.assert_no_leak(
        lambda: None, repeats=5, warmup=0,
        metrics=["process/rss_bytes", "tracemalloc/top/app.py:3/size_bytes"])
    assert report.get("process/rss_bytes") is not None


def _marked(pytester: pytest.Pytester, options: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(f"""
        import pytest

        HELD = []

        @pytest.mark.memprobe_leak_check({options})
        def test_a():
            HELD.append(bytearray(300_000))

        @pytest.mark.memprobe_leak_check({options})
        def test_b():
            pass
        """)
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_the_marker_refuses_a_misspelt_metric_at_collection(pytester: pytest.Pytester) -> None:
    result = _marked(pytester, 'metrics=["tracemalloc/filterd_bytes"]')
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert ("::test_a: memprobe_leak_check: metrics: no probe declares the metric "
            "'tracemalloc/filterd_bytes'; did you mean 'tracemalloc/filtered_bytes'") in err, err
    assert "Traceback" not in err + result.stdout.str()


# 13: documented values that failed every test
@pytest.mark.parametrize("leaks", [3, 4, 7])
def test_every_documented_memprobe_leaks_value_runs(pytester: pytest.Pytester,
                                                    leaks: int) -> None:
    pytester.makepyfile("""
        def test_a():
            pass

        def test_b():
            pass
        """)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--memprobe-leaks={leaks}")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("repeats", [3, 4, 7])
def test_every_documented_marker_repeats_value_runs(pytester: pytest.Pytester,
                                                    repeats: int) -> None:
    result = _marked(pytester, f"repeats={repeats}, max_growth_bytes='100 MB'")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("options, fault", [
    ('probes=["proces"]', "probes: unknown probe 'proces'; did you mean 'process'"),
    ("repeats=10, warmup=8", "warmup: 8 warm-up calls of 10 repeats leave 2 to judge"),
])
def test_a_marker_that_cannot_run_is_one_usage_error_at_collection(
        pytester: pytest.Pytester, options: str, fault: str) -> None:
    result = _marked(pytester, options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    err = result.stderr.str()
    assert f"::test_a: memprobe_leak_check: {fault}" in err, err
    assert "test_b" not in err  # one error, not one per test
    assert "Traceback" not in err + result.stdout.str()


def test_a_marker_warmup_against_memprobe_leaks_is_checked_at_collection(
        pytester: pytest.Pytester) -> None:
    result = _marked(pytester, "warmup=5", "--memprobe-leaks=6")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "warmup: 5 warm-up calls of 6 repeats" in result.stderr.str()


# 24: the cap on repeats
@pytest.mark.parametrize("repeats", [10**9, 100_001])
def test_assert_no_leak_caps_repeats_as_the_marker_does(repeats: int) -> None:
    calls = []
    with pytest.raises(memprobe.ConfigError,
                       match=rf"repeats: must be an int from 3 to 100000, got {repeats}"):
        memprobe.assert_no_leak(lambda: calls.append(1), repeats=repeats)
    assert not calls
