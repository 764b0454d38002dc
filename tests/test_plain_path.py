"""The Prober's compiled plain path (every probe runs in every sample through its flat
code) against the general path, with the probes in either order, with sinks, with the
leak alarm, and when a probe cannot give its flat values mid-sample (a failing probe:
tests/probes/test_hot_path.py)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
import memprobe.keys
from memprobe._flatcode import literal

ORDERS = [["process", "gc"], ["gc", "process"]]


def _probers(order: list[str], **kw: object) -> tuple[memprobe.Prober, memprobe.Prober]:
    plain = memprobe.Prober(order, load_entrypoints=False, **kw).start()  # type: ignore[arg-type]
    # A budget sends every sample down the general path.
    general = memprobe.Prober(order, load_entrypoints=False, budget=1.0, **kw).start()  # type: ignore[arg-type]
    return plain, general


@pytest.mark.parametrize("order", ORDERS)
def test_the_compiled_path_gives_the_general_paths_keys_types_and_history(order) -> None:
    plain, general = _probers(order)
    try:
        for step in range(5):
            a, b = plain.sample(step=step), general.sample(step=step)
            assert list(a) == list(b)
            assert [type(v) for v in a.values()] == [type(v) for v in b.values()]
        assert plain._plain is not None
        assert plain._calls == general._calls == 5  # what the RLlib soak test counts
        assert [s.step for s in plain.history] == list(range(5))
        assert plain.history[-1].values == a
        assert plain.history[-1].pid == os.getpid()
        overhead = [f"memprobe/overhead/{name}_seconds" for name in order]
        assert a["memprobe/overhead/sample_seconds"] == pytest.approx(
            sum(a[k] for k in overhead))
    finally:
        plain.stop()
        general.stop()


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.parametrize("order", ORDERS)
def test_the_compiled_path_writes_what_it_returns_to_each_sink(tmp_path, order) -> None:
    seen: list[memprobe.Sample] = []

    class Keep:  # a user's sink: it is given Sample objects, through _finish
        def write(self, sample: memprobe.Sample) -> None:
            seen.append(sample)

        def close(self) -> None:
            pass

    one = memprobe.Prober(order, load_entrypoints=False, sink=str(tmp_path / "a.jsonl"),
                          tags={"run": 7})
    two = memprobe.Prober(order, load_entrypoints=False, sink=Keep(),
                          sinks={"jsonl": {"path": str(tmp_path / "b.jsonl")}})
    with one, two:
        assert one._plain is not None and two._plain is not None
        got_one = [one.sample(step=i) for i in range(3)]
        got_two = [two.sample(step=i) for i in range(3)]
    lines = _lines(tmp_path / "a.jsonl")
    assert [line["values"] for line in lines] == got_one
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert {line["run"] for line in lines} == {7}
    assert [line["values"] for line in _lines(tmp_path / "b.jsonl")] == got_two
    assert [s.values for s in seen] == got_two


@pytest.mark.parametrize("order", ORDERS)
def test_a_flat_sampler_that_cannot_run_now_gives_the_ordinary_paths_values(order) -> None:
    with memprobe.Prober(order, load_entrypoints=False) as prober:
        expected = list(prober.sample())
        probe = prober.probe("process")
        probe._flat_in = -1  # as in a forked child before the probe reopens its files
        values = prober.sample()
        assert sorted(values) == sorted(expected)
        assert values["memprobe/process/rss_bytes"] > 0
        assert "memprobe/errors/process" not in values
        assert prober._plain is not None  # nothing failed: the plain path stays
        assert prober.history[-1].values == values


def test_the_leak_alarm_checks_on_the_compiled_path() -> None:
    verdicts: list[memprobe.Verdict] = []
    with memprobe.Prober(["process", "gc"], load_entrypoints=False, on_leak=verdicts.append,
                         leak_check_every=10) as prober:
        assert prober._plain is not None and prober.alarm is not None
        for i in range(30):
            prober.sample(step=i)
        assert prober.alarm.latest is not None  # judged at samples 10, 20 and 30
        assert len(prober.history) == 30


def test_a_sample_taken_while_another_thread_left_the_plain_path_takes_the_general_one(
        ) -> None:
    with memprobe.Prober(["process", "gc"], load_entrypoints=False) as prober:
        compiled = prober._plain
        assert compiled is not None
        prober._plain = None  # as _fail does in another thread while this one waits
        values = compiled(prober, None, False)
        assert "memprobe/process/rss_bytes" in values
        assert len(prober.history) == 1


@pytest.mark.parametrize("process", [{"fds": False}, {"count_max_age_seconds": 0},
                                     {"count_max_age_seconds": 10.0}])
@pytest.mark.parametrize("first", ["process", "gc"])
def test_the_fused_code_gives_what_the_probes_flat_samplers_give(process, first) -> None:
    spec = {"process": process, "gc": {}}
    order = [first, *(name for name in spec if name != first)]
    plain = memprobe.Prober({name: spec[name] for name in order}, load_entrypoints=False)
    general = memprobe.Prober({name: spec[name] for name in order}, load_entrypoints=False,
                              budget=1.0)
    with plain, general:
        assert plain._plain is not None
        a, b = plain.sample(), general.sample()
        assert list(a) == list(b)
        assert [type(v) for v in a.values()] == [type(v) for v in b.values()]
        assert ("memprobe/process/num_fds" in a) == process.get("fds", True)
        assert a["memprobe/process/num_threads"] == b["memprobe/process/num_threads"] >= 1


@given(st.text())
def test_a_key_literal_reads_back_as_the_key_and_holds_no_name_marker(key: str) -> None:
    text = literal(key)
    assert "$" not in text
    assert ast.literal_eval(text) == key


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=12))
def test_any_prefix_gives_the_same_keys_on_both_paths(prefix: str) -> None:
    plain = memprobe.Prober(["process", "gc"], load_entrypoints=False, prefix=prefix)
    general = memprobe.Prober(["process", "gc"], load_entrypoints=False, prefix=prefix,
                              budget=1.0)
    with plain, general:
        assert plain._plain is not None
        a, b = plain.sample(), general.sample()
    assert list(a) == list(b)
    assert all(k.startswith(memprobe.keys.prefix_path(prefix)) for k in a)
