"""The Prober: schedule, history, sink, watch, decorator, and isolation of failing probes."""

from __future__ import annotations

import json
import time

import pytest

import memprobe


def test_default_sample_has_the_fixed_keys() -> None:
    with memprobe.Prober() as prober:
        values = prober.sample(step=0)
    for key in ("memprobe/process/rss_bytes", "memprobe/process/vms_bytes",
                "memprobe/process/num_fds", "memprobe/gc/gen0/count"):
        assert key in values, key
    assert values["memprobe/process/rss_bytes"] > 10 * 2**20
    assert prober.history[-1].step == 0


def test_every_and_interval_schedule() -> None:
    with memprobe.Prober({"process": {}, "gc": {"every": 3}}) as prober:
        ran = [("memprobe/gc/garbage_count" in prober.sample()) for _ in range(7)]
    assert ran == [True, False, False, True, False, False, True]
    with memprobe.Prober(["process"], interval_seconds=3600) as prober:
        assert prober.sample() and not prober.sample()
        assert prober.sample(force=True)


def test_history_is_bounded() -> None:
    with memprobe.Prober(["gc"], history=5) as prober:
        for i in range(20):
            prober.sample(step=i)
    assert [s.step for s in prober.history] == list(range(15, 20))
    xs, ys = prober.series("memprobe/gc/garbage_count")
    assert xs == [15.0, 16.0, 17.0, 18.0, 19.0] and len(ys) == 5


def test_jsonl_sink_writes_one_object_per_sample(tmp_path) -> None:
    path = tmp_path / "run-{pid}.jsonl"
    with memprobe.Prober(["process"], sink=path, tags={"role": "test"}) as prober:
        for i in range(3):
            prober.sample(step=i)
    (written,) = tmp_path.glob("run-*.jsonl")
    lines = [json.loads(x) for x in written.read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]
    assert all(x["role"] == "test" and x["values"]["memprobe/process/rss_bytes"] > 0
               for x in lines)
    assert lines[0]["time"] <= lines[2]["time"] <= time.time()


def test_watch_and_decorator() -> None:
    w = memprobe.watch(range(30), probes=["gc"], every=10)
    assert list(w) == list(range(30))
    assert [s.step for s in w.prober.history] == [0, 10, 20]

    prober = memprobe.Prober(["gc"])

    @prober
    def work(x: int) -> int:
        return x * 2

    assert [work(i) for i in range(4)] == [0, 2, 4, 6]
    assert len(prober.history) == 4
    prober.stop()


def test_unknown_probe_suggests_a_close_match() -> None:
    with pytest.raises(memprobe.ConfigError, match="did you mean 'process'") as info:
        memprobe.Prober(["proces"])
    assert info.value.option == "probes"


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"every": 0}, "every"),
        ({"interval_seconds": -1}, "interval_seconds"),
        ({"budget": 2.0}, "budget"),
        ({"history": 0}, "history"),
        ({"probes": {"tracemalloc": {"top": "ten"}}}, "tracemalloc.top"),
        ({"probes": {"process": {"nonsense": 1}}}, "probes.process"),
        ({"probes": "process"}, "probes"),
    ],
)
def test_bad_options_name_the_option(kwargs: dict, option: str) -> None:
    with pytest.raises(memprobe.ConfigError) as info:
        memprobe.Prober(**kwargs)
    assert info.value.option == option


class _Plugin:
    """Hostile probes, each failing in its own way, next to a good one."""

    class Raising:
        def start(self) -> None: ...
        def stop(self) -> None: ...
        def sample(self) -> dict:
            raise RuntimeError("boom")

    class NotNumbers:
        def start(self) -> None: ...
        def stop(self) -> None: ...
        def sample(self) -> dict:
            return {"x_bytes": "lots"}

    class NaN:
        def start(self) -> None: ...
        def stop(self) -> None: ...
        def sample(self) -> dict:
            return {"x_bytes": float("nan")}

    @memprobe.hookimpl
    def memprobe_register_probes(self, register) -> None:
        register("raising", self.Raising)
        register("notnumbers", self.NotNumbers)
        register("nan", self.NaN)


def test_hostile_probes_are_isolated_counted_and_disabled() -> None:
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(_Plugin())
    prober = memprobe.Prober(["process", "raising", "notnumbers", "nan"],
                             plugin_manager=pm, max_failures=2)
    with pytest.warns(memprobe.ProbeFailedWarning) as record:
        with prober:
            samples = [prober.sample() for _ in range(4)]
    for values in samples:
        assert values["memprobe/process/rss_bytes"] > 0  # the good probe is never lost
    assert samples[-1]["memprobe/errors/raising"] == 2  # disabled after two failures
    assert samples[-1]["memprobe/errors/notnumbers"] == 2
    assert samples[-1]["memprobe/errors/nan"] == 2
    messages = " ".join(str(w.message) for w in record)
    assert "boom" in messages and "x_bytes" in messages
    # each probe warned once when it first failed and once when disabled
    assert len(record) == 6


def test_derived_metrics_hook() -> None:
    class Derive:
        @memprobe.hookimpl
        def memprobe_sample_flattened(self, values, prober):
            return {"memprobe/derived/rss_mib": values["memprobe/process/rss_bytes"] / 2**20}

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Derive())
    with memprobe.Prober(["process"], plugin_manager=pm) as prober:
        v = prober.sample()
    assert v["memprobe/derived/rss_mib"] == pytest.approx(v["memprobe/process/rss_bytes"] / 2**20)
