"""The Prober's public surface: describe, the alarm object, the overhead fraction, errors."""

from __future__ import annotations

import ast
import pathlib
import pickle
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

import memprobe
from memprobe._errors import PathError
from memprobe.pytest_plugin._report import PeakError


def test_describe_resolves_every_key_a_prober_emits() -> None:
    with memprobe.Prober(["process", "gc", "example"], prefix="memprobe/driver") as prober:
        values = prober.sample()
    for key in values:
        assert isinstance(prober.describe(key), memprobe.Metric), key
    d = prober.describe
    assert d("memprobe/driver/process/rss_bytes") == memprobe.Metric(
        "resident set size", "bytes", "gauge", judged=True)
    assert d("memprobe/driver/gc/gen2/collected_count").kind == "counter"
    assert d("memprobe/driver/gc/collection_seconds").kind == "interval"
    assert d("memprobe/driver/overhead/gc_seconds") == memprobe.Metric(
        "time the probe's sample() took", "seconds", "interval")
    assert d("memprobe/driver/errors/reentrant").kind == "counter"
    assert d("memprobe/driver/example/samples_count").kind == "counter"  # a plugin's declaration
    assert d("elsewhere/x_bytes").unit == "bytes"  # not this Prober's: the documented default


def test_prober_report_judges_its_own_prefix() -> None:
    with memprobe.Prober(["process"], prefix="memprobe/driver") as prober:
        for i in range(30):
            prober.sample(step=i)
    report = prober.report()
    assert isinstance(report, memprobe.Report) and report.prefix == "memprobe/driver"
    rss = report.get("process/rss_bytes")
    assert rss is not None and rss.key == "memprobe/driver/process/rss_bytes"
    assert rss.metric == "process/rss_bytes" and rss.n_points + rss.warmup_points == 30
    assert report.verdicts and all(k.startswith("memprobe/driver/") for k in report.verdicts)


def test_the_alarm_is_an_object_with_latest_verdicts() -> None:
    seen = []
    prober = memprobe.Prober(["process"], on_leak=seen.append, leak_check_every=10)
    assert isinstance(prober.alarm, memprobe.LeakAlarm)
    assert prober.alarm.latest is None and prober.alarm.alarmed == set()
    with prober:
        for i in range(30):
            prober.sample(step=i)
    assert isinstance(prober.alarm.latest, memprobe.Report)
    assert memprobe.Prober(["process"]).alarm is None


def test_leak_alarm_confirms_before_alarming() -> None:
    from memprobe import Verdict

    fired = []
    alarm = memprobe.LeakAlarm(fired.append, check_every=2, confirmations=2,
                               evidence_samples=2)
    assert [alarm.tick() for _ in range(4)] == [False, True, False, True]
    alarm.reset()

    class FakeReport:  # the attributes the alarm reads
        def __init__(self, keys):
            self.verdicts = {}
            self.leaking = [Verdict.__new__(Verdict) for _ in keys]
            for v, k in zip(self.leaking, keys):
                object.__setattr__(v, "key", k)

    alarm.check(FakeReport(["a"]))
    assert fired == []
    alarm.check(FakeReport(["a"]))  # no new sample since the last check: not evidence
    assert fired == []
    alarm.tick()
    alarm.check(FakeReport(["a"]))  # one new sample: still too little
    assert fired == []
    alarm.tick()
    alarm.check(FakeReport(["a"]))
    assert [v.key for v in fired] == ["a"] and alarm.alarmed == {"a"}
    alarm.tick(), alarm.tick()
    alarm.check(FakeReport(["a"]))
    assert len(fired) == 1  # once per metric
    with pytest.raises(memprobe.ConfigError, match=r"leak_options\.warmpu"):
        memprobe.LeakAlarm("warn", options={"warmpu": 3})


def test_overhead_fraction_is_reported_once_its_window_is_a_second_long() -> None:
    with memprobe.Prober(["process", "gc"]) as prober:
        first = prober.sample()
        t0 = time.perf_counter()
        early = prober.sample()
        while time.perf_counter() - t0 < 1.1:
            time.sleep(0.01)
            last = prober.sample()
    key = "memprobe/overhead/fraction"
    assert key not in first and key not in early
    assert 0 < last[key] < 0.05  # a few µs of probes per 10 ms


def test_a_half_built_probe_prints_nothing() -> None:
    code = ("import memprobe\n"
            "try:\n"
            "    memprobe.Prober(probes={'process': {'full': 'yes'}})\n"
            "except memprobe.ConfigError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "process.full: must be a bool, got 'yes'"
    assert out.stderr == ""


def test_a_program_that_breaks_perf_counter_gets_no_tracebacks_from_the_gc_probe() -> None:
    code = ("import gc, time, memprobe\n"
            "p = memprobe.Prober(['gc']).start()\n"
            "def broken(): raise RuntimeError('no clock')\n"
            "time.perf_counter = broken\n"
            "for _ in range(3): gc.collect()\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "done"
    assert "Exception ignored" not in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("cls", [memprobe.LeakError, memprobe.ConfigError, memprobe.ProbeError,
                                 memprobe.MetricValueError, memprobe.LeakWarning])
def test_public_errors_show_as_memprobe_names(cls) -> None:
    assert cls.__module__ == "memprobe"
    assert repr(cls).startswith("<class 'memprobe.")


def _raised(error: type[BaseException], call: Callable[[], object]) -> BaseException:
    with pytest.raises(error) as info:
        call()
    return info.value


def _leak_error() -> BaseException:
    with memprobe.Prober(["process"]) as prober:
        for i in range(25):
            prober.sample(step=i)
    return memprobe.LeakError("grew: 3 MiB/hour", prober.report())


def _output_error(tmp_path: pathlib.Path) -> BaseException:
    from memprobe.cli._outputs import OutputError, check_outputs

    path = str(tmp_path / "run: 1.jsonl")
    pathlib.Path(path).write_text("")
    return _raised(OutputError, lambda: check_outputs([("-o", path)], [("input", path)]))


def _component_error() -> BaseException:
    leakcheck = pytest.importorskip("memprobe_rllib.leakcheck")
    return leakcheck.ComponentError("env: odd", "could not be set up: ValueError('a: b')")


def _ray_metrics_unavailable() -> BaseException:
    memprobe_ray = pytest.importorskip("memprobe_ray")
    return memprobe_ray.RayMetricsUnavailable('needs ray[default]: pip install "pymemprobe[ray]"')


def _cli_error() -> BaseException:
    from memprobe.cli import CliError

    return CliError("no samples in a: b.jsonl")


#: Every error class memprobe and its integrations define, each made as memprobe makes it
#: where that is cheap; messages hold ": " and quotes, which a message parsed back would lose.
ERRORS: dict[str, Callable[[pathlib.Path], BaseException]] = {
    "ConfigError": lambda _: _raised(
        memprobe.ConfigError, lambda: memprobe.Prober(["proces"], load_entrypoints=False)),
    "ProbeError": lambda _: memprobe.ProbeError("malloc", "unsupported: no mallinfo2()"),
    "MetricValueError": lambda _: _raised(
        memprobe.MetricValueError, lambda: memprobe.flatten({"p": {"x": float("nan")}})),
    "KeyCollisionError": lambda _: memprobe.KeyCollisionError("p/a_b", ("p/a b", "p/a_b")),
    "PathError": lambda _: PathError("a: b.jsonl", "gone"),
    "JsonlReadError": lambda tmp: _raised(
        memprobe.JsonlReadError, lambda: memprobe.read_samples(tmp / "missing: 1.jsonl")),
    "OutputError": _output_error,
    "CliError": lambda _: _cli_error(),
    "LeakError": lambda _: _leak_error(),
    "PeakError": lambda _: PeakError("traced memory peaked +5.0 MiB above the start"),
    "MemprobeError": lambda _: memprobe.MemprobeError("base: message"),
    "ComponentError": lambda _: _component_error(),
    "RayMetricsUnavailable": lambda _: _ray_metrics_unavailable(),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_pickle_with_their_message_and_attributes(name: str,
                                                          tmp_path: pathlib.Path) -> None:
    exc = ERRORS[name](tmp_path)
    assert type(exc).__name__ == name
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is type(exc)
    assert str(again) == str(exc)
    assert again.args == exc.args
    assert vars(again) == vars(exc)  # option, message, path, report, component...
    if isinstance(exc, ImportError):
        assert (again.name, again.path) == (exc.name, exc.path)
    if name == "LeakError":
        assert isinstance(again.report, memprobe.Report) and again.report.verdicts


def test_every_error_class_is_in_the_pickling_test() -> None:
    """Read from the source: a new error class anywhere under src/ joins ERRORS."""
    src = pathlib.Path(__file__).parents[1] / "src"
    defined = set()
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(
                    (getattr(b, "id", None) or getattr(b, "attr", "")).endswith(
                        ("Error", "Exception", "Unavailable")) for b in node.bases):
                defined.add(node.name)
    defined.add("MemprobeError")
    assert defined == set(ERRORS), defined ^ set(ERRORS)


def test_parse_probes_is_public() -> None:
    assert memprobe.parse_probes(None) == {"process": {}, "gc": {}}
    assert memprobe.parse_probes({"gc": None}) == {"gc": {}}
    with pytest.raises(memprobe.ConfigError, match="named twice"):
        memprobe.parse_probes(["gc", "gc"])
