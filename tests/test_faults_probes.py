"""Hostile probes: each fails its own way next to the real process and gc probes.

In every case the caller's loop goes on, the failure is counted under
``memprobe/errors/<probe>`` and warned about with the probe's name, and the
other probes' values in the same sample are all there.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import memprobe


def _nested_dict(depth: int) -> dict[str, Any]:
    node: Any = 1
    for _ in range(depth):
        node = {"a": node}
    return node


def _nested_list(depth: int) -> list[Any]:
    node: Any = 1
    for _ in range(depth):
        node = [node]
    return node


def _raise() -> Any:
    raise RuntimeError("boom in the probe")


def _exit() -> Any:
    sys.exit(3)


class _Key:
    """A key that is neither a str nor an int."""

    def __repr__(self) -> str:
        return "<_Key>"


#: name -> (what sample() does, a fragment the warning must contain)
HOSTILE: dict[str, tuple[Callable[[], Any], str]] = {
    "raises": (_raise, "boom in the probe"),
    "sys_exit": (_exit, "SystemExit"),
    "not_a_number": (lambda: {"x_bytes": "lots"}, "is not a number"),
    "none_value": (lambda: {"x_bytes": None}, "is not a number"),
    "nan": (lambda: {"x_bytes": float("nan")}, "is not finite"),
    "inf": (lambda: {"a": {"b_bytes": float("-inf")}}, "is not finite"),
    "huge_int": (lambda: {"x_bytes": 10**5000}, "outside the 64-bit range"),
    "big_int": (lambda: {"x_bytes": 2**64}, "outside the 64-bit range"),
    "deep_dict": (lambda: {"x": _nested_dict(10_000)}, "nested deeper than"),
    "deep_list": (lambda: {"x": _nested_list(10_000)}, "nested deeper than"),
    "none_key": (lambda: {None: 1}, "is not a string"),
    "tuple_key": (lambda: {("a", 1): 1}, "is not a string"),
    "object_key": (lambda: {"x": {_Key(): 1}}, "is not a string"),
    "float_key": (lambda: {1.5: 1}, "is not a string"),
    "colliding_keys": (lambda: {"a b": 1, "a_b": 2}, "both flatten to"),
    "too_many_keys": (lambda: {f"k{i}": i for i in range(20_000)}, "over max_keys=10000"),
    "huge_list": (lambda: {"x": list(range(1_000_000))}, "over max_keys=10000"),
    "too_many_nested": (
        lambda: {f"g{i}": {f"k{j}": j for j in range(200)} for i in range(100)},
        "over max_keys=10000",
    ),
    "list_not_mapping": (lambda: [1, 2, 3], "returned list, not a mapping"),
    "none_not_mapping": (lambda: None, "returned NoneType, not a mapping"),
    "str_not_mapping": (lambda: "12 bytes", "returned str, not a mapping"),
}


def _plugin(probes: dict[str, type]) -> Any:
    class Plugin:
        @memprobe.hookimpl
        def memprobe_register_probes(self, register: Any) -> None:
            for name, cls in probes.items():
                register(name, cls)

    return Plugin()


def _probe_class(sample: Callable[[], Any], start: Callable[[], Any] | None = None) -> type:
    class Hostile:
        def start(self) -> None:
            if start is not None:
                start()

        def stop(self) -> None: ...

        def sample(self) -> Any:
            return sample()

    return Hostile


def _prober(probes: dict[str, type], spec: Any, **options: Any) -> memprobe.Prober:
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(_plugin(probes))
    return memprobe.Prober(spec, plugin_manager=pm, **options)


@pytest.fixture(scope="module")
def good_keys() -> set[str]:
    """The keys process and gc give in a clean sample (their values are not compared)."""
    with memprobe.Prober(["process", "gc"], load_entrypoints=False) as prober:
        values = prober.sample()
    keys = {k for k in values if "/overhead/" not in k}
    assert "memprobe/process/rss_bytes" in keys and "memprobe/gc/gen0/count" in keys
    return keys


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_probe_is_counted_warned_and_isolated(name: str, good_keys: set[str]) -> None:
    sample, fragment = HOSTILE[name]
    prober = _prober({name: _probe_class(sample)}, ["process", name, "gc"], max_failures=2)
    steps_done = 0
    with pytest.warns(memprobe.ProbeFailedWarning) as record:
        with prober:
            samples = []
            for step in range(4):
                samples.append(prober.sample(step=step))
                steps_done += 1
    assert steps_done == 4  # the caller's loop went on
    for values in samples:
        assert good_keys <= set(values), good_keys - set(values)
        assert values["memprobe/process/rss_bytes"] > 0
        assert not any(k.startswith(f"memprobe/{name}/") for k in values)
    # counted, disabled after max_failures=2 failures in a row, and still visible after
    assert [v[f"memprobe/errors/{name}"] for v in samples] == [1, 2, 2, 2]
    assert f"memprobe/timeouts/{name}" not in samples[-1]
    assert len(prober.history) == 4
    # warned twice: at the first failure, and when disabled; each names the probe and the fault
    messages = [str(w.message) for w in record]
    assert len(messages) == 2, messages
    for m in messages:
        assert f"memprobe probe {name!r} failed in sample()" in m
        assert fragment in m
        assert f"memprobe/errors/{name}" in m
    assert "it is disabled" in messages[1]


def test_hostile_values_do_not_reach_the_jsonl_file(tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    probes = {"huge": _probe_class(HOSTILE["huge_int"][0]), "nan": _probe_class(HOSTILE["nan"][0])}
    with pytest.warns(memprobe.ProbeFailedWarning):
        with _prober(probes, ["process", "huge", "nan"], sink=path) as prober:
            for step in range(3):
                prober.sample(step=step)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]  # the sink was not turned off
    assert all(x["values"]["memprobe/process/rss_bytes"] > 0 for x in lines)
    assert lines[-1]["values"]["memprobe/errors/huge"] == 3


def test_hanging_isolated_probe_is_abandoned_within_its_limit(good_keys: set[str]) -> None:
    release = threading.Event()
    entered = threading.Event()

    def hang() -> Any:
        entered.set()
        release.wait(60)
        return {"x_bytes": 1}

    limit = 0.2
    prober = _prober(
        {"hang": _probe_class(hang)},
        {"process": {}, "gc": {}, "hang": {"isolate": True, "time_limit_seconds": limit}},
    )
    try:
        with pytest.warns(memprobe.ProbeFailedWarning, match="'hang' failed in sample") as rec:
            with prober:
                t0 = time.perf_counter()
                first = prober.sample(step=0)
                elapsed = time.perf_counter() - t0
                later = [prober.sample(step=i) for i in range(1, 4)]
        assert entered.is_set()
        # returned after about the limit (generous: the machine is shared), not after 60 s
        assert limit <= elapsed < limit + 5, elapsed
        for values in (first, *later):
            assert good_keys <= set(values)
            assert values["memprobe/errors/hang"] == 1
            assert values["memprobe/timeouts/hang"] == 1
            assert "memprobe/hang/x_bytes" not in values
        assert len(rec) == 1 and "did not return within 0.2 s" in str(rec[0].message)
        assert "it is disabled" in str(rec[0].message)
    finally:
        release.set()  # let the abandoned thread end


def test_hang_in_start_of_an_isolated_probe_is_abandoned() -> None:
    release = threading.Event()
    prober = _prober(
        {"stuck": _probe_class(lambda: {"x_bytes": 1}, start=lambda: release.wait(60))},
        {"process": {}, "stuck": {"isolate": True}},
        time_limit_seconds=0.1,
    )
    try:
        with pytest.warns(memprobe.ProbeFailedWarning, match="'stuck' failed"):
            with prober:
                values = [prober.sample() for _ in range(3)]
        assert all(v["memprobe/process/rss_bytes"] > 0 for v in values)
        assert values[-1]["memprobe/timeouts/stuck"] == 1
    finally:
        release.set()


def test_isolated_probe_that_raises_is_an_error_not_a_timeout() -> None:
    prober = _prober({"raises": _probe_class(_raise)},
                     {"process": {}, "raises": {"isolate": True, "time_limit_seconds": 5}},
                     max_failures=2)
    with pytest.warns(memprobe.ProbeFailedWarning, match="boom in the probe"):
        with prober:
            values = [prober.sample() for _ in range(3)]
    assert values[-1]["memprobe/errors/raises"] == 2
    assert "memprobe/timeouts/raises" not in values[-1]


def test_slow_probe_over_its_limit_has_its_values_dropped(good_keys: set[str]) -> None:
    def slow() -> Any:
        time.sleep(0.15)
        return {"x_bytes": 1}

    prober = _prober({"slow": _probe_class(slow)},
                     {"process": {}, "gc": {}, "slow": {"time_limit_seconds": 0.05}},
                     max_failures=2)
    with pytest.warns(memprobe.ProbeFailedWarning, match="over its time limit of 0.05 s") as rec:
        with prober:
            samples = [prober.sample() for _ in range(3)]
    for values in samples:
        assert good_keys <= set(values)
        assert "memprobe/slow/x_bytes" not in values
    assert [v["memprobe/timeouts/slow"] for v in samples] == [1, 2, 2]
    assert [v["memprobe/errors/slow"] for v in samples] == [1, 2, 2]
    assert all("'slow'" in str(w.message) for w in rec)


def test_probe_that_recovers_keeps_its_count_and_is_not_disabled() -> None:
    calls = iter(range(100))

    def flaky() -> Any:
        if next(calls) % 2 == 0:
            raise OSError("transient")
        return {"x_bytes": 1}

    prober = _prober({"flaky": _probe_class(flaky)}, ["process", "flaky"], max_failures=2)
    with pytest.warns(memprobe.ProbeFailedWarning, match="transient") as rec:
        with prober:
            samples = [prober.sample() for _ in range(6)]
    assert [("memprobe/flaky/x_bytes" in v) for v in samples] == [False, True] * 3
    assert samples[-1]["memprobe/errors/flaky"] == 3
    assert len(rec) == 1  # warned once; never two failures in a row, so never disabled


def test_start_and_stop_failures_are_counted() -> None:
    class BadStart:
        def start(self) -> None:
            raise RuntimeError("cannot start")

        def stop(self) -> None: ...

        def sample(self) -> dict[str, int]:
            return {"x_bytes": 1}

    class BadStop:
        def start(self) -> None: ...

        def stop(self) -> None:
            raise RuntimeError("cannot stop")

        def sample(self) -> dict[str, int]:
            return {"x_bytes": 1}

    prober = _prober({"bad_start": BadStart, "bad_stop": BadStop},
                     ["process", "bad_start", "bad_stop"])
    with pytest.warns(memprobe.ProbeFailedWarning) as rec:
        with prober:
            values = [prober.sample() for _ in range(2)]
    assert all(v["memprobe/errors/bad_start"] == 1 for v in values)
    assert all(v["memprobe/bad_stop/x_bytes"] == 1 for v in values)
    messages = " ".join(str(w.message) for w in rec)
    assert "'bad_start' failed in start()" in messages and "cannot start" in messages
    assert "'bad_stop' failed in stop()" in messages and "cannot stop" in messages


def test_failing_factory_names_the_probe() -> None:
    class Exploding:
        def __init__(self) -> None:
            raise RuntimeError("no such device")

    with pytest.raises(memprobe.ProbeError, match="no such device") as info:
        _prober({"exploding": Exploding}, ["process", "exploding"])
    assert info.value.probe == "exploding"


def test_failing_hooks_and_user_sink_are_counted_once_each() -> None:
    class Hooks:
        @memprobe.hookimpl
        def memprobe_sample_flattened(self, values: Any, prober: Any) -> Any:
            return {"memprobe/derived/x": float("nan")}

        @memprobe.hookimpl
        def memprobe_sample_end(self, sample: Any, prober: Any) -> None:
            raise RuntimeError("exporter down")

    class BrokenSink:
        def write(self, sample: Any) -> None:
            raise OSError("socket closed")

        def close(self) -> None:
            raise OSError("socket closed")

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Hooks(), name="hooks")
    prober = memprobe.Prober(["process"], plugin_manager=pm, sink=BrokenSink())
    with pytest.warns(memprobe.ProbeFailedWarning) as rec:
        with prober:
            values = [prober.sample() for _ in range(3)]
    assert all(v["memprobe/process/rss_bytes"] > 0 for v in values)
    # a sample shows the failures before it: two hooks and the sink failed in each earlier one
    assert [v.get("memprobe/errors/hooks") for v in values] == [None, 2, 4]
    assert [v.get("memprobe/errors/sink") for v in values] == [None, 1, 2]
    assert "memprobe/derived/x" not in values[-1]
    messages = [str(w.message) for w in rec]
    assert len([m for m in messages if "'hooks'" in m]) == 1
    assert len([m for m in messages if "'sink'" in m]) == 1
    assert any("closing the sink failed" in m for m in messages)


def test_value_that_turns_hostile_after_a_good_sample_is_caught(tmp_path) -> None:
    """The first samples teach flatten the result's shape; a later bad value is still caught."""
    values_in = iter([1, 2, 10**30, float("inf"), "x", 10**5000, 3])

    def drifting() -> Any:
        return {"x_bytes": next(values_in), "y": {"z_count": 1}}

    path = tmp_path / "run.jsonl"
    prober = _prober({"drifting": _probe_class(drifting)}, ["process", "drifting"],
                     max_failures=10, sink=path)
    with pytest.warns(memprobe.ProbeFailedWarning, match="'drifting'"):
        with prober:
            samples = [prober.sample() for _ in range(7)]
    got = [v.get("memprobe/drifting/x_bytes") for v in samples]
    assert got == [1, 2, None, None, None, None, 3]
    assert samples[-1]["memprobe/errors/drifting"] == 4
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 7  # the sink never saw a value it could not write


def test_hostile_values_and_new_shapes_after_the_fast_path(tmp_path) -> None:
    """After 20 samples of one shape flatten runs the plan it recorded for that shape;
    a bad value, a bool, a key more, a key less, then the old shape again are each
    flattened (or refused) as the slow path would."""
    good = [{"x_bytes": i, "y": {"z_count": 1}} for i in range(20)]
    later = [
        {"x_bytes": float("nan"), "y": {"z_count": 1}},  # refused
        {"x_bytes": 2**64, "y": {"z_count": 1}},  # refused: beyond 64 bits
        {"x_bytes": True, "y": {"z_count": 1}},  # a bool: 1
        {"x_bytes": 5, "y": {"z_count": 1, "w_count": 2}},  # a key more
        {"x_bytes": 6, "y": {}},  # a key less
        {"x_bytes": 7, "y": {"z_count": 1.5}},  # a float where an int was
        {"x_bytes": 8, "y": {"z_count": 1}},  # the first shape again
    ]
    results = iter(good + later)

    def drifting() -> Any:
        return next(results)

    prober = _prober({"drifting": _probe_class(drifting)}, ["drifting"], max_failures=10,
                     sink=tmp_path / "run.jsonl")
    with pytest.warns(memprobe.ProbeFailedWarning, match="'drifting'.*not finite"):
        with prober:
            samples = [prober.sample() for _ in good]
            samples += [prober.sample() for _ in later]

    def probe_keys(v: dict) -> dict:
        return {k: x for k, x in v.items() if k.startswith("memprobe/drifting/")}

    assert probe_keys(samples[19]) == {"memprobe/drifting/x_bytes": 19,
                                       "memprobe/drifting/y/z_count": 1}
    assert [probe_keys(v) for v in samples[20:]] == [
        {},
        {},
        {"memprobe/drifting/x_bytes": 1, "memprobe/drifting/y/z_count": 1},
        {"memprobe/drifting/x_bytes": 5, "memprobe/drifting/y/w_count": 2,
         "memprobe/drifting/y/z_count": 1},
        {"memprobe/drifting/x_bytes": 6},
        {"memprobe/drifting/x_bytes": 7, "memprobe/drifting/y/z_count": 1.5},
        {"memprobe/drifting/x_bytes": 8, "memprobe/drifting/y/z_count": 1},
    ]
    assert type(samples[22]["memprobe/drifting/x_bytes"]) is int  # True became 1
    assert samples[-1]["memprobe/errors/drifting"] == 2


def test_sys_exit_in_a_sample_end_hook_or_a_sink_is_counted_not_raised() -> None:
    """A plugin's sys.exit() inside a sample is a failure like a probe's: it never ends
    the caller's loop."""
    class Quits:
        @memprobe.hookimpl
        def memprobe_sample_end(self, sample: Any, prober: Any) -> None:
            sys.exit("exporter gave up")

    class QuittingSink:
        def write(self, sample: Any) -> None:
            sys.exit(2)

        def close(self) -> None:
            pass

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Quits(), name="quits")
    prober = memprobe.Prober(["gc"], plugin_manager=pm, sink=QuittingSink())
    with pytest.warns(memprobe.ProbeFailedWarning) as rec:
        with prober:
            values = [prober.sample() for _ in range(3)]
    assert [v.get("memprobe/errors/quits") for v in values] == [None, 1, 2]
    assert [v.get("memprobe/errors/sink") for v in values] == [None, 1, 2]
    messages = [str(w.message) for w in rec]
    assert any("'quits' failed in memprobe_sample_end: SystemExit: exporter gave up" in m
               for m in messages)
    assert any("'sink' failed in write: SystemExit: 2" in m for m in messages)


def test_sys_exit_in_a_sample_flattened_hook_is_counted_not_raised() -> None:
    class Quits:
        @memprobe.hookimpl
        def memprobe_sample_flattened(self, values: Any, prober: Any) -> Any:
            raise SystemExit(1)

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Quits(), name="quits")
    with pytest.warns(memprobe.ProbeFailedWarning, match="'quits' failed"):
        with memprobe.Prober(["gc"], plugin_manager=pm) as prober:
            prober.sample()
            values = prober.sample()
    assert values["memprobe/errors/quits"] == 1


#: name -> (the row sample() returns for the columns ("a_bytes", "b_count"), the warning)
HOSTILE_ROWS: dict[str, tuple[Any, str]] = {
    "nan": ((float("nan"), 1), r"'memprobe/rowdy/a_bytes'.*is not finite"),
    "inf": ((1, float("inf")), r"'memprobe/rowdy/b_count'.*is not finite"),
    "str": (("lots", 1), r"'memprobe/rowdy/a_bytes'.*is not a number"),
    "none": ((1, None), r"'memprobe/rowdy/b_count'.*is not a number"),
    "big_int": ((2**64, 1), "outside the 64-bit range"),
    "short": ((1,), "a row of 1 values for 2 columns"),
    "long": ((1, 2, 3), "a row of 3 values for 2 columns"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ROWS))
def test_a_hostile_row_is_counted_and_the_next_good_one_kept(name: str) -> None:
    bad, message = HOSTILE_ROWS[name]
    rows = iter([(1, 2), bad, (3, 4)])

    class Rowdy:
        columns = ("a_bytes", "b_count")

        def start(self) -> None: ...

        def stop(self) -> None: ...

        def sample(self) -> Any:
            return next(rows)

    prober = _prober({"rowdy": Rowdy}, ["rowdy", "gc"], sink=None)
    with pytest.warns(memprobe.ProbeFailedWarning, match=message):
        with prober:
            samples = [prober.sample() for _ in range(3)]
    rowdy = [{k: v for k, v in s.items() if k.startswith("memprobe/rowdy/")} for s in samples]
    assert rowdy == [{"memprobe/rowdy/a_bytes": 1, "memprobe/rowdy/b_count": 2}, {},
                     {"memprobe/rowdy/a_bytes": 3, "memprobe/rowdy/b_count": 4}]
    assert samples[1]["memprobe/gc/garbage_count"] >= 0  # the other probe's values are there
    assert samples[2]["memprobe/errors/rowdy"] == 1


@pytest.mark.parametrize("columns", [None, "a_bytes", ("a", 1), ("a", "a")])
def test_a_row_without_good_columns_names_the_probe(columns: Any) -> None:
    class Rowdy:
        def start(self) -> None: ...

        def stop(self) -> None: ...

        def sample(self) -> Any:
            return (1, 2)

    if columns is not None:
        Rowdy.columns = columns  # type: ignore[attr-defined]
    prober = _prober({"rowdy": Rowdy}, ["rowdy", "gc"])
    with pytest.warns(memprobe.ProbeFailedWarning, match="'rowdy'.*columns"):
        with prober:
            values = prober.sample()
    assert values["memprobe/errors/rowdy"] == 1
    assert not any(k.startswith("memprobe/rowdy/") for k in values)


def test_a_row_of_bools_and_numpy_like_numbers_is_converted() -> None:
    import fractions

    class Rowdy:
        columns = ("flag_count", "ratio", "n_count")

        def start(self) -> None: ...

        def stop(self) -> None: ...

        def sample(self) -> Any:
            return (True, fractions.Fraction(1, 4), 3)

    with _prober({"rowdy": Rowdy}, ["rowdy"]) as prober:
        values = prober.sample()
    got = {k: (v, type(v)) for k, v in values.items() if k.startswith("memprobe/rowdy/")}
    assert got == {"memprobe/rowdy/flag_count": (1, int), "memprobe/rowdy/ratio": (0.25, float),
                   "memprobe/rowdy/n_count": (3, int)}
