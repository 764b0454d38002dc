"""The trend estimator and the verdicts: exact cases, properties, bad input."""

from __future__ import annotations

import mmap
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe._trend import auto_warmup, theil_sen

ints = st.integers(min_value=-10_000, max_value=10_000)


@given(a=ints, b=ints, n=st.integers(min_value=2, max_value=60))
def test_slope_of_a_line_is_exact(a: int, b: int, n: int) -> None:
    xs = list(range(n))
    slope, low, high, icpt = theil_sen(xs, [a * x + b for x in xs])
    assert slope == low == high == a
    assert icpt == b


@settings(max_examples=50)
@given(
    noise=st.lists(st.integers(-1000, 1000), min_size=25, max_size=60),
    c=ints,
    shift=st.integers(0, 50),
)
def test_invariance_and_monotonicity(noise: list[int], c: int, shift: int) -> None:
    xs = list(range(len(noise)))
    base = memprobe.analyze(xs, noise, warmup=None)
    moved = memprobe.analyze(xs, [y + c for y in noise], warmup=None)
    assert moved.slope_per_step == pytest.approx(base.slope_per_step)
    assert moved.status == base.status
    # Adding a trend adds exactly that much to the slope (Theil-Sen is equivariant).
    tilted = memprobe.analyze(xs, [y + shift * x for x, y in zip(xs, noise)], warmup=None)
    assert tilted.slope_per_step == pytest.approx(base.slope_per_step + shift)
    assert tilted.slope_low >= base.slope_low - 1e-9


@settings(max_examples=30)
@given(seed=st.integers(0, 2**32 - 1))
def test_flat_noise_permuted_is_not_a_leak(seed: int) -> None:
    rng = random.Random(seed)
    noise = [rng.gauss(0, 30_000) for _ in range(200)]
    rng.shuffle(noise)
    v = memprobe.analyze(list(range(200)), noise)
    assert v.status == "ok", v.describe()


def test_one_kib_per_step_in_rss_like_noise_is_a_leak() -> None:
    rng = random.Random(1)
    xs = list(range(200))
    v = memprobe.analyze(xs, [1024 * x + rng.gauss(0, 30_000) for x in xs], key="rss_bytes")
    assert v.status == "leak"
    assert v.slope_low < 1024 < v.slope_high
    assert v.key == "rss_bytes" and v.leak


def test_step_then_plateau_is_warmup_not_leak() -> None:
    xs = list(range(200))
    ys = [(5_000_000 if x >= 20 else x * 250_000) + (x * 7919 % 13) * 100 for x in xs]
    v = memprobe.analyze(xs, ys)
    assert v.status == "levelled", v.describe()  # it grew, then levelled off
    assert v.warmup_points >= 20
    assert auto_warmup(xs, [3 * x for x in xs]) == 0  # a steady leak has no warm-up


def test_insufficient_and_rate_per_hour() -> None:
    v = memprobe.analyze([0, 1, 2], [1, 2, 3])
    assert v.status == "insufficient" and v.n_points == 3
    xs = list(range(30))
    v = memprobe.analyze(xs, [10 * x for x in xs], times=[100.0 + 2 * x for x in xs])
    assert v.rate_per_hour == pytest.approx(10 / 2 * 3600)
    assert memprobe.analyze(xs, [10 * x for x in xs], warmup=10).warmup_points == 10


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"warmup": "soon"}, "warmup"),
        ({"confidence": 1.5}, "confidence"),
        ({"min_points": 1}, "min_points"),
    ],
)
def test_bad_options_name_the_culprit(kwargs: dict, option: str) -> None:
    with pytest.raises(memprobe.ConfigError) as err:
        memprobe.analyze([0, 1, 2], [0, 1, 2], **kwargs)
    assert err.value.option == option


def test_bad_series_named() -> None:
    with pytest.raises(memprobe.ConfigError, match=r"rss.*2 x values but 3"):
        memprobe.analyze([0, 1], [0, 1, 2], key="rss")
    with pytest.raises(memprobe.ConfigError, match="nan"):
        memprobe.analyze([0, 1, 2], [0, float("nan"), 2])


def test_fast_enough_for_live_use() -> None:
    rng = random.Random(0)
    xs = list(range(500))
    ys = [rng.gauss(0, 1e4) + 50 * x for x in xs]
    memprobe.analyze(xs, ys)
    t0 = time.perf_counter()
    for _ in range(20):
        memprobe.analyze(xs, ys)
    per_call = (time.perf_counter() - t0) / 20
    assert per_call < 0.02  # typically ~2 ms; generous for a loaded CI machine


def _samples(n: int, site_rate: int) -> list[memprobe.Sample]:
    out = []
    for i in range(n):
        values = {
            "memprobe/process/rss_bytes": 50_000_000 + site_rate * i,
            "memprobe/tracemalloc/traced_bytes": 1_000_000 + site_rate * i,
            "memprobe/tracemalloc/top/app/cache.py:12/size_bytes": 1000 + site_rate * i,
            "memprobe/tracemalloc/top/app/ok.py:3/size_bytes": 5000 + (i % 3),
            "memprobe/objects/top/dict/count": 100 + (i % 2),
        }
        out.append(memprobe.Sample(1000.0 + i, i, 1, values))
    return out


def test_analyze_samples_names_the_site() -> None:
    report = memprobe.analyze_samples(_samples(60, 512))
    traced = report.get("tracemalloc/traced_bytes")
    assert traced is not None and traced.leak
    assert traced.culprit == "app/cache.py:12"
    assert report.suspects == ["app/cache.py:12"]
    assert set(report.grew) == {"process/rss_bytes", "tracemalloc/traced_bytes"}
    assert report.get("process/rss_bytes").note.startswith("Python allocations")
    assert "app/cache.py:12" in str(report)
    quiet = memprobe.analyze_samples(_samples(60, 0))
    assert not quiet.leak and quiet.suspects == []


def _fresh_mib() -> mmap.mmap:
    """1 MiB in fresh pages, touched: rss grows by it (a bytearray could reuse free heap
    pages earlier tests left resident, and rss not grow; seen in CI)."""
    m = mmap.mmap(-1, 1 << 20)
    m.write(b"x" * (1 << 20))
    return m


def test_prober_alarm_warns_once_and_never_breaks_the_loop() -> None:
    keep = []
    with memprobe.Prober(["process"], on_leak="warn", leak_check_every=10) as prober:
        with pytest.warns(memprobe.LeakWarning) as caught:
            for i in range(40):
                keep.append(_fresh_mib())
                prober.sample(step=i)
    messages = [str(w.message) for w in caught]
    assert any("rss_bytes: leak" in m for m in messages)
    assert len(messages) == len(set(messages))  # each metric alarms once
    assert prober.report().get("process/rss_bytes").leak

    def broken(verdict: object) -> None:
        raise RuntimeError("user callback broke")

    with memprobe.Prober(["process"], on_leak=broken, leak_check_every=5) as prober:
        with pytest.warns(memprobe.ProbeFailedWarning, match="leak_alarm"):
            for i in range(30):
                keep.append(_fresh_mib())
                prober.sample(step=i)
    with pytest.raises(memprobe.ConfigError, match="on_leak"):
        memprobe.Prober(["process"], on_leak=42)


def test_filtered_bytes_is_judged_instead_of_traced_bytes() -> None:
    samples = []
    for i in range(60):
        values = {
            "memprobe/tracemalloc/traced_bytes": 1_000_000 + 1600 * i,  # memprobe's own history
            "memprobe/tracemalloc/filtered_bytes": 900_000 + (i % 3) * 8,
        }
        samples.append(memprobe.Sample(1000.0 + i, i, 1, values))
    report = memprobe.analyze_samples(samples)
    assert not report.leak, report
    assert report.get("tracemalloc/traced_bytes") is None
    assert report.get("tracemalloc/filtered_bytes").status == "ok"
    # Asked for by name, traced bytes are judged (and leak).
    named = memprobe.analyze_samples(samples, metrics=["tracemalloc/traced_bytes"])
    assert named.get("tracemalloc/traced_bytes").leak


@settings(max_examples=40)
@given(ys=st.lists(st.integers(-5000, 5000), min_size=4, max_size=60), slope=st.integers(-50, 50))
def test_autocorrelation_factor_never_narrows(ys: list[int], slope: int) -> None:
    from memprobe._trend import autocorrelation_factor

    xs = list(range(len(ys)))
    f = autocorrelation_factor(xs, ys, slope)
    assert f >= 1.0
    # It depends on the residuals' ranks only: shifting or scaling them changes nothing.
    assert autocorrelation_factor(xs, [3 * y + 7 for y in ys], 3 * slope) == pytest.approx(f)
    wide = theil_sen(xs, ys, autocorrelation=True)
    narrow = theil_sen(xs, ys)
    assert wide[1] <= narrow[1] and wide[2] >= narrow[2]


def test_allocator_steps_widen_the_interval() -> None:
    # A level that switches between two values in long runs (an arena held, then
    # released): the plain interval calls the drift significant, the corrected one not.
    xs = list(range(120))
    ys = [(65536 if (x // 30) % 2 else 0) + (x * 7919 % 17) * 50 + (x >= 90) * 65536 for x in xs]
    plain = memprobe.analyze(xs, ys, warmup=None, autocorrelation=False)
    corrected = memprobe.analyze(xs, ys, warmup=None)
    assert corrected.slope_low < plain.slope_low
    assert not corrected.leaking and corrected.status in ("ok", "levelled"), corrected.describe()


def test_growth_that_stopped_halfway_is_not_a_leak() -> None:
    # A cache that fills for 100 steps and then stays full: the whole window's slope
    # is significant, but the last half does not grow, so it is no leak.
    xs = list(range(200))
    ys = [1000 * min(x, 100) + (x * 7919 % 13) * 100 for x in xs]
    v = memprobe.analyze(xs, ys, warmup=None)
    assert v.slope_low > 0 and v.status == "levelled", v.describe()
    leak = memprobe.analyze(xs, [1000 * x + (x * 7919 % 13) * 100 for x in xs], warmup=None)
    assert leak.status == "leak"


class _Replay:
    """A probe that returns the next value of a fixed series, as ``level_bytes``."""

    series: list[float] = []

    def __init__(self) -> None:
        self.i = 0

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def sample(self) -> dict:
        self.i += 1
        return {"level_bytes": self.series[self.i - 1]}


class _ReplayPlugin:
    @memprobe.hookimpl
    def memprobe_register_probes(self, register) -> None:
        register("replay", _Replay)


@pytest.mark.parametrize("confirmations", [1, 2, 3])
def test_alarm_fires_after_the_confirmations_in_a_row(confirmations: int) -> None:
    """The alarm fires at the first check that ends a run of ``confirmations`` leaking
    checks, judged on the history the Prober had at each check."""
    # Flat (a deterministic wobble), then a steady leak of 4 KiB per sample.
    _Replay.series = [1e6 + 3000 * ((i * 7) % 5) + (4096 * (i - 60) if i > 60 else 0)
                      for i in range(200)]
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(_ReplayPlugin())
    fired: list[int] = []
    checks: list[bool] = []
    with memprobe.Prober(["replay"], plugin_manager=pm, on_leak=lambda v: fired.append(i),
                         leak_check_every=10, leak_confirmations=confirmations,
                         leak_options={"metrics": ["replay/level_bytes"]}) as prober:
        for i in range(200):
            prober.sample(step=i)
            if (i + 1) % 10 == 0:
                report = memprobe.analyze_samples(list(prober.history),
                                                  metrics=["replay/level_bytes"])
                checks.append(bool(report.get("replay/level_bytes").leak))
    first = next(c for c in range(len(checks))
                 if c + 1 >= confirmations and all(checks[c + 1 - confirmations: c + 1]))
    assert fired == [10 * first + 9]  # once, at that check
    assert not any(checks[:5])  # the flat part never leaked, so the alarm waited for the leak
