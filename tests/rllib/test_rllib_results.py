"""From samples to RLlib metrics, with RLlib's real MetricsLogger (no Ray cluster needed).

The reduce of each key comes from its metric declaration; a key once logged is
logged at every flush (no NaN); the adapter's own buffers are not counted as
the user's memory.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("ray.rllib")

from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from memprobe.keys import site_name
from memprobe_rllib import CallbackOptions, MemoryProbeCallback
from memprobe_rllib._leak import LeakState, culprits_of
from memprobe_rllib._process import ProcessProber
from memprobe_rllib._results import no_forecast_as_minus_one

pytestmark = pytest.mark.rllib


def process(probes, **options):
    opts = CallbackOptions(probes=probes, **options)
    return ProcessProber(opts, "env_runner", 1, prefix="memprobe", step_name="a test step")


def test_reduce_kinds_come_from_declarations_and_no_key_goes_nan():
    pp = process(["process", "gc"], site_keys=True).start()
    logger = MetricsLogger()
    try:
        pp.log.add(pp.prober.sample(step=1))
        # A site key that shows up once, then leaves the top N.
        pp.log.add({"memprobe/tracemalloc/top/my_env.py:3/size_bytes": 4096})
        pp.log.flush(logger)
        first = logger.reduce(compile=True)
        pp.log.add(pp.prober.sample(step=2))
        pp.log.flush(logger)
        second = logger.reduce(compile=True)
        pp.log.flush(logger)  # a sample() call in which nothing was sampled
        third = logger.reduce(compile=True)
    finally:
        pp.prober.stop()
    assert set(first) == set(second) == set(third)
    for reduced in (first, second, third):
        assert not [k for k, v in reduced.items() if math.isnan(float(v))]
    site = "memprobe/tracemalloc/top/my_env.py:3/size_bytes"
    assert (first[site], second[site]) == (4096, 0)  # left the top N: 0, not NaN
    rss = "memprobe/process/rss_bytes"
    assert third[rss] == second[rss] > 0  # a gauge keeps its latest value
    assert third[rss + "_max"] >= third[rss]
    assert pp.prober.describe("memprobe/gc/gen0/collections_count").kind == "counter"
    counter = "memprobe/gc/gen0/collections_count"
    # Counters are logged as increases (RLlib sums them over processes and time).
    assert first[counter] >= 0 and third[counter] == 0
    assert third["memprobe/overhead/sample_seconds"] == 0  # interval: nothing this time


def test_site_keys_stay_out_of_results_unless_asked():
    pp = process(["process"])
    pp.log.add({"memprobe/tracemalloc/top/my_env.py:3/size_bytes": 4096,
                "memprobe/objects/top/dict/count": 5, "memprobe/process/rss_bytes": 1})
    assert set(pp.log.cells) == {"memprobe/process/rss_bytes"}


def test_hours_to_oom_is_the_soonest_forecast_over_the_env_runners():
    """The soonest kill is what matters: the minimum over the EnvRunners that have a
    forecast, not a mean that mixes in the -1 of those with none; -1 when none has one."""
    key = "memprobe/leak/hours_to_oom"
    runners = [process(["process"]) for _ in range(3)]
    leaves = [MetricsLogger() for _ in runners]
    root = MetricsLogger(root=True)
    seen = []
    for forecasts in [(-1.0, 5.0, 2.5), (-1.0, -1.0, -1.0), (4.0, -1.0, 3.0)]:
        for pp, leaf, hours in zip(runners, leaves, forecasts):
            pp.log.add({key: hours})
            pp.log.flush(leaf)
        root.aggregate([leaf.reduce() for leaf in leaves], key="env_runners")
        result = root.reduce(compile=True)
        no_forecast_as_minus_one(result["env_runners"])
        seen.append(float(result["env_runners"][key]))
    assert seen == [2.5, -1.0, 3.0]
    # The driver's callback does it to the results of train(), evaluation's included.
    result = {"env_runners": {key: math.inf},
              "evaluation": {"env_runners": {key: math.inf, "other": math.inf}}}
    MemoryProbeCallback.configure(driver=False)().on_train_result(result=result)
    assert result == {"env_runners": {key: -1.0},
                      "evaluation": {"env_runners": {key: -1.0, "other": math.inf}}}


def test_the_adapters_buffers_are_not_the_users_memory():
    """tracemalloc on in this process: no site of memprobe_rllib among the top sites or
    the growing ones, and the Python bytes judged do not grow in a loop that only logs."""
    pp = process({"process": {}, "tracemalloc": {"top": 200}}, leak_check_every=5).start()
    logger = MetricsLogger()
    try:
        for i in range(80):
            pp.log.add(pp.prober.sample(step=i))
            pp.log.flush(logger)
            logger.reduce(compile=True)
            pp.leak_values()
        keys = [k for s in pp.prober.history for k in s.values]
    finally:
        pp.prober.stop()
    head = "memprobe/tracemalloc/"
    sites = {site_name(k[len(head):]) for k in keys if k.startswith(head)} - {None}
    assert len(sites) > 20  # tracemalloc really reported sites
    assert not [s for s in sites if "memprobe" in s], sorted(s for s in sites if "memprobe" in s)
    filtered = pp.prober.alarm.latest.verdicts.get("memprobe/tracemalloc/filtered_bytes")
    assert filtered is not None and not filtered.leak, filtered  # the judged Python bytes
    assert pp.prober.alarm is not None and pp.prober.alarm.latest is not None


def test_the_leak_keys_are_the_same_before_and_after_an_alarm_except_the_culprit():
    from memprobe import Verdict

    leak = LeakState("memprobe", "env_runner", 2, "a sample at each episode end")
    sample_keys = ["memprobe/process/rss_bytes", "memprobe/process/num_fds"]
    before = leak.values(sample_keys)
    assert before["memprobe/leak/suspect"] == 0 and before["memprobe/leak/env_runner_2"] == 0
    v = Verdict("memprobe/process/num_fds", "leak", 1.0, 0.5, 1.5, 3600.0, 40, 0, kind="fds")
    assert culprits_of(v, [], "memprobe") == ("fds",)
    with pytest.warns(Warning, match="env_runner 2 leaks: process/num_fds .*where: fds"):
        leak.on_leak(v)
    after = leak.values(sample_keys)
    assert set(after) - set(before) == {"memprobe/leak/culprit/fds/rate_per_hour"}
    assert after["memprobe/leak/process/num_fds/suspect"] == 1
    assert after["memprobe/leak/env_runner_2"] == 1
    assert after["memprobe/leak/process/num_fds/rate_per_hour"] == 3600.0


def test_a_metrics_rate_key_is_its_growth_not_a_warm_ups_slope():
    """A verdict judged levelled off (a warm-up) or ok logs a rate of 0, not the slope of
    the warm-up it judged; growing slightly logs its rate."""
    from memprobe import Verdict

    key = "memprobe/process/rss_bytes"
    rates = {}
    for status in ("levelled", "ok", "insufficient", "slight", "leak"):
        leak = LeakState("memprobe", "driver", None, "a train() iteration")
        leak.latest[key] = Verdict(key, status, 4096.0, 2048.0, 8192.0, 5.6e8, 40, 0,
                                   unit="bytes")
        rates[status] = leak.values([key])["memprobe/leak/process/rss_bytes/rate_per_hour"]
    assert rates == {"levelled": 0.0, "ok": 0.0, "insufficient": 0.0,
                     "slight": 5.6e8, "leak": 5.6e8}


def test_library_sites_are_told_from_the_users():
    from memprobe.keys import is_library_site

    for site in ("collections/__init__.py:690", "ray/rllib/utils/spaces/space_utils.py:399",
                 "numpy/_core/numeric.py:232", "frozen_abc:123"):
        assert is_library_site(site), site
    for site in ("my_env.py:26", "benchmarks/rllib_field_envs.py:49"):
        assert not is_library_site(site), site


def test_growing_types_are_named_from_the_history():
    from memprobe import Sample
    from memprobe_rllib._leak import growing_types

    history = [Sample(float(i), i, 1, {"memprobe/objects/total_count": 1000 + 10 * i,
                                       "memprobe/objects/top/dict/count": 500,
                                       "memprobe/objects/top/my_env.Note/count": 10 * i})
               for i in range(12)]
    assert growing_types(history, "memprobe") == ["my_env.Note"]
    v = __import__("memprobe").Verdict("memprobe/objects/total_count", "leak", 10.0, 9.0, 11.0,
                                       None, 12, 0)
    assert culprits_of(v, history, "memprobe") == ("my_env.Note",)


def new_evidence(alarm) -> None:
    """Count the samples a check needs since the last one for it to count toward the
    alarm's confirmations (its ``evidence_samples``), as a Prober's samples would."""
    for _ in range(alarm.evidence_samples):
        alarm.tick()


def _checked_by_hand(confirmations: int):
    """An EnvRunner's LeakState and its Prober (the process probe, no capture), whose
    alarm counts each check below that follows one new sample (``new_evidence``)."""
    from memprobe import Prober

    leak = LeakState("memprobe", "env_runner", 1, "a sample at each episode end")
    prober = Prober(probes=["process"], on_leak=leak.on_leak,
                    leak_confirmations=confirmations, capture_on_leak=False)
    leak.prober = prober
    prober.alarm.evidence_samples = 1
    return leak, prober


def test_an_alarm_is_lowered_only_after_twice_as_many_healthy_checks_as_raised_it():
    """A leak's resident size stalls while the process reuses memory it freed (for
    three checks in a row after the alarm's capture in a field run): healthy checks in
    the middle of a leak must not lower the alarm."""
    from memprobe import Report, Verdict

    leak, prober = _checked_by_hand(confirmations=2)
    key = "memprobe/process/rss_bytes"

    def check(status):
        v = Verdict(key, status, 4096.0, 2048.0, 8192.0, 2.0**30, 40, 0, kind="native")
        new_evidence(prober.alarm)
        prober.alarm.check(Report({key: v}, prefix="memprobe"))
        return leak.values([key])["memprobe/leak/env_runner_1"]

    with pytest.warns(Warning, match="env_runner 1 leaks"):
        raised = [check("leak"), check("leak")]
    assert raised == [0.0, 1.0]
    assert [check("levelled"), check("leak"), check("ok"), check("ok"), check("levelled")] \
        == [1.0, 1.0, 1.0, 1.0, 1.0]
    assert check("levelled") == 0.0  # the fourth healthy check in a row lowers it
    assert leak.values([key])["memprobe/leak/suspect"] == 0.0
    # The leak goes on: raised again at two leaking checks in a row (the Prober's
    # alarm calls on_leak once per key, so this is the adapter's own doing).
    assert [check("leak"), check("ok"), check("leak"), check("leak")] == [0.0, 0.0, 0.0, 1.0]
    assert leak.values([key])["memprobe/leak/suspect"] == 1.0


class _Level:
    """A probe whose one value the test sets: a process's level, jumps and stalls."""

    value = 1000

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def sample(self) -> dict:
        return {"value_bytes": _Level.value}


class _LevelPlugin:
    import memprobe

    @memprobe.hookimpl
    def memprobe_register_probes(self, register) -> None:
        register("level", _Level)


def test_an_alarm_holds_while_a_jump_keeps_the_level_ahead_of_the_leaks_pace():
    """The alarm's capture (or any buffer that came and went) lifts the resident size
    at once; a leak then reuses the freed memory and its level stays flat for as long
    as the leak takes to grow by that much. Healthy checks in that stall do not count;
    once the level falls behind the pace it alarmed at, they lower the alarm."""
    import memprobe
    from memprobe import Prober, Report, Verdict

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(_LevelPlugin())
    leak = LeakState("memprobe", "env_runner", 1, "a sample at each episode end")
    # Checks only by hand: the Prober's own checks would judge the level series too.
    prober = Prober(probes=["level"], plugin_manager=pm, on_leak=leak.on_leak,
                    leak_confirmations=2, capture_on_leak=False, leak_check_every=100_000)
    leak.prober = prober
    prober.alarm.evidence_samples = 1  # each check below follows one new sample
    key = "memprobe/level/value_bytes"
    per_hour = 3600.0 * 2**20  # the alarm's pace: 1 MiB per second

    def check(status, level):
        _Level.value = level
        prober.sample()
        v = Verdict(key, status, 4096.0, 2048.0, 8192.0, per_hour, 40, 0, kind="native")
        new_evidence(prober.alarm)
        prober.alarm.check(Report({key: v}, prefix="memprobe"))
        return leak.values([key])["memprobe/leak/env_runner_1"]

    with prober:
        with pytest.warns(Warning, match="env_runner 1 leaks"):
            assert [check("leak", 1000), check("leak", 1000)] == [0.0, 1.0]
        # A jump of 1 GiB: at 1 MiB/s the leak needs 1024 s to grow past it.
        assert [check("levelled", 1000 + 2**30) for _ in range(8)] == [1.0] * 8
        # Back under where the leak's pace would be: four healthy checks lower it.
        assert [check("ok", 1000) for _ in range(4)] == [1.0, 1.0, 1.0, 0.0]


_RSS = "memprobe/process/rss_bytes"
_NATIVE = "memprobe/leak/culprit/native/rate_per_hour"
_LINE = "memprobe/leak/culprit/app.py:12/rate_per_hour"


def _guessed_then(first=None, **fields):
    """The leak keys after a check of the cheap probes alone (the culprit "native"
    guessed at the alarm; its verdict's fields ``first``), and after a second check
    whose verdict has ``fields``."""
    from memprobe import Report, Verdict

    leak, prober = _checked_by_hand(confirmations=1)

    def check(**given):
        v = Verdict(_RSS, "leak", 4096.0, 2048.0, 8192.0, 2.0**30, 40, 0, unit="bytes",
                    **given)
        new_evidence(prober.alarm)
        prober.alarm.check(Report({_RSS: v}, prefix="memprobe"))
        return leak.values([_RSS])

    with pytest.warns(Warning, match="env_runner 1 leaks"):
        guessed = check(**(first or {}))
    return guessed, check(**fields)


def test_a_guessed_native_culprit_replaced_by_the_capture_is_logged_as_zero():
    """The cheap probes alone guess "native" at the alarm; the capture's Python line
    replaces it. RLlib keeps a key's last value once logged, so the guess's key stays
    in the results at 0, not at the rate that blamed it."""
    guessed, named = _guessed_then(kind="python", culprits=("app.py:12",))
    assert guessed[_NATIVE] == 2.0**30 and _LINE not in guessed
    assert named[_LINE] == 2.0**30
    assert named[_NATIVE] == 0.0
    # "native" with no line judged at the alarm (tracing windows that saw too little
    # survive) gives way the same: the live keys of regex_leak in diagnose listed it
    # first, before the capture's line.
    guessed, named = _guessed_then(first={"kind": "native"}, kind="python",
                                   culprits=("app.py:12",))
    assert guessed[_NATIVE] == 2.0**30
    assert [k for k in named if "/culprit/" in k and named[k]] == [_LINE]


def test_a_guessed_native_culprit_gives_way_to_the_users_line_that_holds_it():
    """Default mode, a kept ``torch.Tensor`` or C buffer: the capture judges the growth
    native and names the user's line whose objects hold it. That line replaces the
    guessed "native" (logged at 0); a native verdict naming only a library's line or a
    type keeps "native"."""
    _, held = _guessed_then(kind="native", culprits=(
        "app.py:12", "torch.Tensor", "ray/rllib/env/single_agent_episode.py:80"))
    assert held[_LINE] == 2.0**30 and held[_NATIVE] == 0.0
    assert [k for k in held if "/culprit/" in k and held[k]] == [_LINE]
    _, library = _guessed_then(kind="native",
                               culprits=("numpy/_core/numeric.py:232", "torch.Tensor"))
    assert library[_NATIVE] == 2.0**30 and _LINE not in library


def test_the_captured_culprits_rates_follow_the_order_the_verdict_gives():
    """The capture names the user's line (most of what it kept), a second line and a
    library type: the type is left out beside a named line, each line gets its share of
    the rate by the bytes the capture saw kept, and the keys come fastest first (the
    guess it replaced at 0, after them)."""
    from memprobe import Report, Verdict

    leak, prober = _checked_by_hand(confirmations=1)
    key = "memprobe/process/rss_bytes"
    rate = 2.0**30

    def check(**fields):
        v = Verdict(key, "leak", 4096.0, 2048.0, 8192.0, rate, 40, 0, unit="bytes", **fields)
        new_evidence(prober.alarm)
        prober.alarm.check(Report({key: v}, prefix="memprobe"))
        return leak.values([key])

    with pytest.warns(Warning, match="env_runner 1 leaks"):
        check()
    # What a capture would have found: the user's line kept 3/4 of the bytes.
    from memprobe.capture import Culprits
    from memprobe.leak._alarm_capture import AlarmCapture

    capture = AlarmCapture({})
    capture.culprits = Culprits(python_sites=(("app.py:12--numpy/_core/numeric.py:232", 3000, 3),
                                              ("app.py:30", 1000, 9)))
    prober.alarm._capture = capture
    with pytest.warns(Warning, match="culprits found since the alarm"):
        out = check(kind="python", culprits=("app.py:12--numpy/_core/numeric.py:232",
                                             "ray.rllib.utils.metrics.stats.mean.MeanStats",
                                             "app.py:30"))
    culprits = [(k.split("/culprit/")[1].rsplit("/", 1)[0], v) for k, v in out.items()
                if "/culprit/" in k]
    assert culprits == [("app.py:12_numpy/_core/numeric.py:232", 0.75 * rate),
                        ("app.py:30", 0.25 * rate), ("native", 0.0)], culprits


@given(st.lists(st.tuples(st.sampled_from(["a.py:1", "b.py:2", "c.py:3", "T", "d.py:4"]),
                          st.integers(0, 10**6)), max_size=6, unique_by=lambda t: t[0]),
       st.floats(0, 1e12))
def test_culprit_rates_never_rise_down_the_list_nor_sum_past_the_rate(sized, rate):
    from memprobe.capture import Culprits
    from memprobe_rllib._leak import culprit_rates

    names = [n for n, _ in sized]
    captured = Culprits(python_sites=tuple((n, b, 1) for n, b in sized if n != "T"))
    rates = culprit_rates(names, rate, captured)
    assert list(rates) == names
    values = list(rates.values())
    assert all(a >= b for a, b in zip(values, values[1:]))
    sized_total = sum(v for n, v in rates.items() if n != "T" and dict(sized)[n] > 0)
    assert sized_total <= rate * (1 + 1e-9) + 1e-6
    assert all(v >= 0 for v in values)


def test_a_library_line_named_at_a_faster_metric_s_rate_comes_after_the_user_s():
    """diagnose mode: the resident size's verdict names the user's line then a library
    line (RLlib's episodes in flight); a count of live blocks, at a rate of its own, names
    two library lines. Ranked by rate, the user's line must still come first (a Ray run
    listed ``numpy_to_tensor.py:109`` and ``space_utils.py:399`` before it)."""
    from memprobe import Verdict

    leak = LeakState("memprobe", "env_runner", 1, "a sample at each episode end")
    user = "app.py:12 → numpy/_core/numeric.py:232"
    lib = ("ray/rllib/connectors/common/numpy_to_tensor.py:109",
           "ray/rllib/utils/spaces/space_utils.py:399")
    with pytest.warns(Warning, match="env_runner 1 leaks"):
        leak.on_leak(Verdict("memprobe/gc/allocated_blocks", "leak", 90.0, 80.0, 99.0, 4e6,
                             40, 0, unit="blocks", kind="python", culprits=lib))
    leak.on_leak(Verdict("memprobe/process/rss_bytes", "leak", 4096.0, 2048.0, 8192.0, 1e6,
                         40, 0, unit="bytes", kind="python", culprits=(user, lib[0])))
    ranked = leak.ranked_culprits()
    assert ranked[0][0] == user and {n for n, _ in ranked[1:]} == set(lib), ranked
    rates = [r for _, r in ranked]
    assert rates[0] == 1e6 and rates[1] <= 0.5e6 and rates[2] < rates[1], ranked
    keys = [k for k in leak.values(()) if "/culprit/" in k]
    assert keys[0].startswith("memprobe/leak/culprit/app.py:12"), keys


def test_a_count_s_culprit_comes_after_the_bytes_verdict_s_and_a_chain_is_spelt_once():
    """diagnose, regex: a count of live blocks names the user's line alone at its rate in
    blocks per hour (higher than the bytes'); the resident size names the chain down to
    the library. The chain, which a bytes verdict named, comes first; and the chain a
    verdict gives as ``a--b`` and the capture as ``a → b`` is one culprit, not two."""
    from memprobe import Verdict

    leak = LeakState("memprobe", "env_runner", 1, "a sample at each episode end")
    chain = "app.py:157--re/_compiler.py:761"
    with pytest.warns(Warning, match="env_runner 1 leaks"):
        leak.on_leak(Verdict("memprobe/gc/allocated_blocks", "leak", 90.0, 80.0, 99.0, 4e7,
                             40, 0, unit="blocks", kind="python", culprits=("app.py:157",)))
    leak.on_leak(Verdict("memprobe/process/rss_bytes", "leak", 4096.0, 2048.0, 8192.0, 1e6,
                         40, 0, unit="bytes", kind="python", culprits=(chain, "app.py:157")))
    leak.on_leak(Verdict("memprobe/objects/total_count", "leak", 9.0, 8.0, 9.9, 5e7,
                         40, 0, unit="objects", kind="objects", culprits=("app.py:157",)))
    ranked = leak.ranked_culprits()
    assert [n for n, _ in ranked] == ["app.py:157 → re/_compiler.py:761", "app.py:157"], ranked
    assert ranked[0][1] == 1e6 and 0.99e6 < ranked[1][1] < 1e6, ranked
