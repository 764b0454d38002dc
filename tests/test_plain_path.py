"""The one sample path: a probe's row paired with the keys the Prober made once, or its
mapping flattened, with the probes in either order, with options, with sinks and with
the leak alarm. The built-in probes take the path any plugin's probe takes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
import memprobe.keys

ORDERS = [["process", "gc"], ["gc", "process"]]

PROCESS = ["data_bytes", "num_fds", "num_threads", "rss_bytes", "shared_bytes", "vms_bytes"]
GC = ["collection_seconds", "collection_seconds_total", "garbage_count",
      "gen0/count", "gen1/count", "gen2/count",
      *(f"gen{i}/{s}_count" for i in range(3) for s in ("collected", "collections",
                                                        "uncollectable"))]
KEYS = {"process": PROCESS, "gc": GC}


def _expected_keys(order: list[str]) -> list[str]:
    out: list[str] = []
    for name in order:
        out += [f"memprobe/{name}/{m}" for m in KEYS[name]]
        out.append(f"memprobe/overhead/{name}_seconds")
    return [*out, "memprobe/overhead/sample_seconds"]


@pytest.mark.parametrize("order", ORDERS)
def test_keys_types_order_and_history(order: list[str]) -> None:
    with memprobe.Prober(order, load_entrypoints=False) as prober:
        got = [prober.sample(step=step) for step in range(5)]
    for values in got:
        assert list(values) == _expected_keys(order)
        assert all(type(v) is float for k, v in values.items()
                   if "seconds" in k), values
        assert all(type(v) is int for k, v in values.items()
                   if k.endswith(("_bytes", "_count", "num_fds", "num_threads"))), values
    assert prober._calls == 5  # what the RLlib soak test counts
    assert [s.step for s in prober.history] == list(range(5))
    assert [s.values for s in prober.history] == got
    assert prober.history[-1].pid == os.getpid()
    last = got[-1]
    assert last["memprobe/overhead/sample_seconds"] >= sum(
        last[f"memprobe/overhead/{name}_seconds"] for name in order)


def test_the_built_in_probes_return_rows_of_their_columns() -> None:
    """The built-in probes give their values the way any plugin's probe may."""
    with memprobe.Prober(["process", "gc"], load_entrypoints=False) as prober:
        for name in ("process", "gc"):
            probe = prober.probe(name)
            row = probe.sample()
            assert type(row) is tuple and list(probe.columns) == KEYS[name]
            assert len(row) == len(probe.columns)


class _Queue:
    """A third-party probe that returns a row, the way the built-in probes do."""

    columns = ("items_count", "wait_seconds")
    metrics = {"items_count": memprobe.Metric("items", "count"),
               "wait_seconds": memprobe.Metric("wait", "seconds")}

    def __init__(self) -> None:
        self.n = 0

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def sample(self) -> tuple[int, float]:
        self.n += 1
        return self.n, self.n / 10


class _Nested:
    """A third-party probe that returns a nested mapping."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def sample(self) -> dict[str, Any]:
        return {"b": {"y_count": 2}, "a_count": 1}


def _pm() -> Any:
    class Plugin:
        @memprobe.hookimpl
        def memprobe_register_probes(self, register: Any) -> None:
            register("queue", _Queue)
            register("nested", _Nested)

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Plugin(), name="plugin")
    return pm


def test_a_plugins_rows_and_mappings_take_the_same_path() -> None:
    with memprobe.Prober(["queue", "gc", "nested"], plugin_manager=_pm()) as prober:
        first = prober.sample()
        second = prober.sample()
    assert [k for k in second if k.startswith(("memprobe/queue/", "memprobe/nested/"))] == [
        "memprobe/queue/items_count", "memprobe/queue/wait_seconds",
        "memprobe/nested/a_count", "memprobe/nested/b/y_count"]
    assert first["memprobe/queue/items_count"] == 1 and second["memprobe/queue/items_count"] == 2
    assert second["memprobe/queue/wait_seconds"] == 0.2
    assert prober.describe("memprobe/queue/wait_seconds").unit == "seconds"
    assert list(prober.history[-1].values) == list(second)


@pytest.mark.parametrize("process", [{"fds": False}, {"count_max_age_seconds": 0},
                                     {"count_max_age_seconds": 10.0}, {"full": True}])
@pytest.mark.parametrize("gc_options", [{}, {"blocks": True}, {"collect": True}])
def test_options_give_their_keys_in_name_order(process, gc_options) -> None:
    with memprobe.Prober({"process": process, "gc": gc_options},
                         load_entrypoints=False) as prober:
        values = prober.sample()
    proc = [k for k in values if k.startswith("memprobe/process/")]
    gcs = [k for k in values if k.startswith("memprobe/gc/")]
    assert ("memprobe/process/num_fds" in proc) == process.get("fds", True)
    assert ("memprobe/process/uss_bytes" in proc) == ("full" in process)
    assert proc == sorted(proc)
    assert values["memprobe/process/num_threads"] >= 1
    if gc_options:  # an option's extra metric: every key in name order
        assert gcs == sorted(gcs)
        # blocks=True: the blocks, and the full collections' count and blocks after
        assert len(gcs) == len(GC) + (3 if gc_options.get("blocks") else 1)
    else:
        assert gcs == [f"memprobe/gc/{m}" for m in GC]


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.parametrize("order", ORDERS)
def test_each_sink_is_given_what_sample_returns(tmp_path, order) -> None:
    seen: list[memprobe.Sample] = []

    class Keep:  # a user's sink
        def write(self, sample: memprobe.Sample) -> None:
            seen.append(sample)

        def close(self) -> None:
            pass

    one = memprobe.Prober(order, load_entrypoints=False, sink=str(tmp_path / "a.jsonl"),
                          tags={"run": 7})
    two = memprobe.Prober(order, load_entrypoints=False, sink=Keep(),
                          sinks={"jsonl": {"path": str(tmp_path / "b.jsonl")}})
    with one, two:
        got_one = [one.sample(step=i) for i in range(3)]
        got_two = [two.sample(step=i) for i in range(3)]
        with two.phase("eval"):
            got_two.append(two.sample(step=3))
    lines = _lines(tmp_path / "a.jsonl")
    assert [line["values"] for line in lines] == got_one
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert {line["run"] for line in lines} == {7}
    b_lines = _lines(tmp_path / "b.jsonl")
    assert [line["values"] for line in b_lines[:3]] == got_two[:3]
    assert b_lines[4]["values"] == got_two[3] and b_lines[4]["phase"] == "eval"
    assert [s.values for s in seen] == [line["values"] for line in b_lines]
    assert [s.labels for s in seen][2:] == [None, {"phase": "eval", "phase_edge": "start"},
                                            {"phase": "eval"},
                                            {"phase": "eval", "phase_edge": "end"}]
    with pytest.raises(AttributeError):  # a sink cannot change what others are given
        seen[0].labels = {"x": "y"}  # type: ignore[misc]


def test_the_leak_alarm_checks_every_n_samples() -> None:
    verdicts: list[memprobe.Verdict] = []
    with memprobe.Prober(["process", "gc"], load_entrypoints=False, on_leak=verdicts.append,
                         leak_check_every=10) as prober:
        assert prober.alarm is not None
        for i in range(30):
            prober.sample(step=i)
        assert prober.alarm.latest is not None  # judged at samples 10, 20 and 30
        assert len(prober.history) == 30


def test_a_probe_reopened_in_this_process_gives_its_values() -> None:
    """As in a forked child: the process probe's kept fds are not this process's."""
    with memprobe.Prober(["process", "gc"], load_entrypoints=False) as prober:
        expected = list(prober.sample())
        probe = prober.probe("process")
        probe._opened_in = -1
        values = prober.sample()
        assert list(values) == expected
        assert values["memprobe/process/rss_bytes"] > 0
        assert "memprobe/errors/process" not in values


@pytest.mark.parametrize("order", ORDERS)
def test_a_failing_probe_leaves_the_others_values(tmp_path, order) -> None:
    with pytest.warns(memprobe.ProbeFailedWarning), \
            memprobe.Prober(order, load_entrypoints=False) as prober:
        prober.sample()
        probe = prober.probe("process")
        os.close(probe._statm)  # the kept fd is gone: pread fails
        probe._statm = os.open(tmp_path, os.O_RDONLY)  # a directory: pread raises
        values = prober.sample(step=3)
        assert values["memprobe/errors/process"] == 1
        assert "memprobe/gc/garbage_count" in values  # the other probe's values are kept
        assert "memprobe/overhead/gc_seconds" in values
        assert "memprobe/process/rss_bytes" not in values
        assert prober.history[-1].values == values and prober.history[-1].step == 3


def test_a_budget_set_later_spaces_the_probes_out() -> None:
    with memprobe.Prober(["process", "gc"], load_entrypoints=False) as prober:
        prober.sample()
        prober.budget = 1e-9  # each probe may now run only once its cost has passed many times
        prober.sample()
        skipped = prober.sample()  # the budget spaces the probes out: none is due yet
    assert "memprobe/process/rss_bytes" not in skipped


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=12))
def test_any_prefix_gives_keys_under_it(prefix: str) -> None:
    with memprobe.Prober(["process", "gc"], load_entrypoints=False, prefix=prefix) as prober:
        a = prober.sample()
    head = memprobe.keys.prefix_path(prefix)
    assert all(k.startswith(head) for k in a)
    assert [k[len(head):] for k in a] == [k[len("memprobe/"):] for k in _expected_keys(
        ["process", "gc"])]
