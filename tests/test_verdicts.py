"""Verdicts: statuses, magnitude, kinds of growth, prefixes, bad input."""

from __future__ import annotations

import mmap
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.trend import auto_warmup
from series_shapes import replay_plugin

ints = st.integers(min_value=-10_000, max_value=10_000)


@settings(max_examples=50, deadline=None)
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


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_flat_noise_permuted_is_not_a_leak(seed: int) -> None:
    rng = random.Random(seed)
    noise = [rng.gauss(0, 30_000) for _ in range(200)]
    rng.shuffle(noise)
    v = memprobe.analyze(list(range(200)), noise)
    # Not growing; a warm-up cut may see a rise in pure noise and say "levelled off".
    assert v.status in ("ok", "levelled") and not v.leaking, v.describe()


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


def test_growth_on_too_few_points_to_tell_from_a_warmup_is_insufficient() -> None:
    xs = list(range(39))
    v = memprobe.analyze(xs, [1000 * x for x in xs])
    assert v.status == "insufficient" and v.slope_per_step == 1000 and "+1000" in v.describe()
    longer = [*xs, 39]
    assert memprobe.analyze(longer, [1000 * x for x in longer]).leaking
    assert memprobe.analyze(xs, [1000 * x for x in xs], warmup=0).leaking


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
    report = memprobe.analyze_samples(_samples(60, 8192))
    traced = report.get("tracemalloc/traced_bytes")
    assert traced is not None and traced.leaking
    assert traced.culprit == "app/cache.py:12" and traced.kind == "python"
    assert report.culprits == ["app/cache.py:12"]
    assert set(report.leaking_metrics) == {"process/rss_bytes", "tracemalloc/traced_bytes"}
    assert report.get("process/rss_bytes").kind == "python"
    assert report.kind == "python" and report.culprit == "app/cache.py:12"
    assert "app/cache.py:12" in str(report)
    quiet = memprobe.analyze_samples(_samples(60, 0))
    assert not quiet.has_leak and quiet.culprits == [] and quiet.kind is None


@pytest.mark.parametrize(("kept_type", "kind", "first"), [
    ("re.Pattern", "python", "app/cache.py:12"),  # a library's class: the user's line says more
    ("numpy.ndarray", "python", "app/cache.py:12"),
    ("app.Session", "objects", "app.Session"),  # the user's own class: look for its holders
])
def test_a_kept_type_is_retained_objects_only_when_it_is_the_users_class(
        kept_type: str, kind: str, first: str) -> None:
    samples = _samples(60, 8192)
    for i, s in enumerate(samples):
        s.values[f"memprobe/objects/top/{kept_type}/count"] = 10 + 4 * i
    report = memprobe.analyze_samples(samples)
    traced = report.get("tracemalloc/traced_bytes")
    assert traced.kind == kind and traced.culprits[0] == first, traced


def test_a_python_leak_spread_below_each_sites_floor_is_named_by_the_sites_that_grow() -> None:
    """The traced bytes leak, but no site alone grows past the floor a site's verdict
    needs: the sites growing slightly name it, not nothing."""
    samples = _samples(60, 0)
    for i, s in enumerate(samples):
        s.values["memprobe/tracemalloc/traced_bytes"] += 4 * 3000 * i
        for j in range(4):
            s.values[f"memprobe/tracemalloc/top/app/part{j}.py:7/size_bytes"] = 500 + 3000 * i
    report = memprobe.analyze_samples(samples)
    traced = report.get("tracemalloc/traced_bytes")
    assert traced.leaking and traced.kind == "python", traced
    assert not any(v.leaking for v in report.sites), report.sites
    assert traced.culprits and traced.culprits[0].startswith("app/part"), traced


def test_a_site_too_young_for_a_verdict_of_its_own_still_names_a_python_leak() -> None:
    """The leak's site appears halfway (after an import, in a short ``memprobe run``): too
    few points for its own verdict; the traced bytes leak, and it is named by what it grew,
    not the sum of the sites refused a key (``other``)."""
    samples = _samples(60, 0)
    for i, s in enumerate(samples):
        s.values["memprobe/tracemalloc/traced_bytes"] += 20000 * i
        # Summed into "other" until the site gets a key of its own at sample 35.
        s.values["memprobe/tracemalloc/top/other/size_bytes"] = 100 + 20000 * min(i, 34)
        if i >= 35:
            s.values["memprobe/tracemalloc/top/helper.py:4/size_bytes"] = 20000 * i
    report = memprobe.analyze_samples(samples)
    traced = report.get("tracemalloc/traced_bytes")
    assert traced.leaking and traced.kind == "python", traced
    assert traced.culprits == ("helper.py:4",), traced


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
            for i in range(160):  # a leak is told from a warm-up from 40 points on;
                # the checks that count toward the confirmations are 40 samples apart,
                # and span 1.5 times the scale the first of them rested on
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
            for i in range(160):
                keep.append(_fresh_mib())
                prober.sample(step=i)
    with pytest.raises(memprobe.ConfigError, match="on_leak"):
        memprobe.Prober(["process"], on_leak=42)


def test_what_the_alarm_does_after_a_check_is_not_the_checks_own_memory() -> None:
    """The resident size a check keeps is memprobe's (subtracted from the user's); what
    its ``on_leak`` (or the capture it opens) takes afterwards is not: counted, it would
    hide that much of the leak that raised the alarm."""
    keep: list[mmap.mmap] = []
    fired: list[str] = []

    def on_leak(verdict: memprobe.Verdict) -> None:
        fired.append(verdict.key)
        keep.extend(_fresh_mib() for _ in range(8))  # 8 MiB after the verdict

    with memprobe.Prober(["process"], on_leak=on_leak, leak_check_every=10,
                         capture_on_leak=False) as prober:
        for i in range(200):
            keep.append(_fresh_mib())
            prober.sample(step=i)
    assert "memprobe/process/rss_bytes" in fired
    kept = [s.values["memprobe/overhead/check_retained_bytes"] for s in prober.history
            if "memprobe/overhead/check_retained_bytes" in s.values]
    assert kept and max(kept) < 4 << 20, kept  # the judging's own pages, not on_leak's 8 MiB
    assert prober.report().get("process/rss_bytes").leak


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


@pytest.mark.parametrize("confirmations", [1, 2, 3])
def test_alarm_fires_after_the_confirmations_in_a_row(confirmations: int) -> None:
    """The alarm fires at the first check that ends a run of ``confirmations`` leaking
    checks spanning 1.5 times the scale the first of them rested on (at most
    PERSISTENCE_SAMPLES), judged on the history the Prober had at each check."""
    from memprobe.leak._alarm import PERSISTENCE, PERSISTENCE_SAMPLES

    # Flat (a deterministic wobble), then a steady leak of 4 KiB per sample.
    series = [1e6 + 3000 * ((i * 7) % 5) + (4096 * (i - 60) if i > 60 else 0)
                      for i in range(400)]
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(replay_plugin(series, "replay", "level_bytes"))
    fired: list[int] = []
    checks: list[tuple[int, bool, int]] = []
    with memprobe.Prober(["replay"], plugin_manager=pm, on_leak=lambda v: fired.append(i),
                         leak_check_every=10, leak_confirmations=confirmations,
                         leak_options={"metrics": ["replay/level_bytes"]}) as prober:
        for i in range(400):
            prober.sample(step=i)
            if (i + 1) % 10 == 0:
                v = memprobe.analyze_samples(list(prober.history),
                                             metrics=["replay/level_bytes"]).get(
                                                 "replay/level_bytes")
                checks.append((i, v.leak, v.span_points))
    # The checks that count toward the confirmations are 40 samples (4 checks) apart.
    counted = checks[::4]
    start = next(c for c, (_, leak, _) in enumerate(counted) if leak)
    assert all(leak for _, leak, _ in counted[start:])  # a steady leak
    wait = min(PERSISTENCE * counted[start][2], PERSISTENCE_SAMPLES)
    first = next(c for c in range(start + confirmations - 1, len(counted))
                 if counted[c][0] - counted[start][0] >= wait)
    assert fired == [counted[first][0]]  # once, at that check
    assert not any(leak for _, leak, _ in checks[:5])  # the flat part never leaked


# -- prefixes --------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["memprobe/driver", "x", ""])
def test_any_prefix_is_judged(prefix: str) -> None:
    head = f"{prefix}/" if prefix else ""
    samples = [
        memprobe.Sample(1000.0 + i, i, 1, {f"{head}overhead/sample_seconds": 1e-5,
                                           f"{head}process/rss_bytes": 5e7 + 65536 * i,
                                           f"{head}tracemalloc/top/a.py:1/size_bytes": 100.0})
        for i in range(60)
    ]
    for report in (memprobe.analyze_samples(samples),
                   memprobe.analyze_samples(samples, prefix=prefix)):
        assert report.prefix == prefix
        rss = report.get("process/rss_bytes")
        assert rss is not None and rss.leaking and rss.metric == "process/rss_bytes"
        assert [v.site for v in report.sites] == ["a.py:1"]


def test_prober_with_a_driver_prefix_gets_a_report() -> None:
    with memprobe.Prober(["process"], prefix="memprobe/driver",
                         load_entrypoints=False) as prober:
        for i in range(25):
            prober.sample(step=i)
        report = prober.report()
    rss = report.get("process/rss_bytes")
    assert rss is not None and rss.key == "memprobe/driver/process/rss_bytes"
    assert rss.status in ("ok", "levelled", "slight", "insufficient")


# -- magnitude and units -------------------------------------------------------------


def _filtered(per_step: float, n: int = 50, level: float = 2e6) -> list[memprobe.Sample]:
    return [memprobe.Sample(1000.0 + 2 * i, i, 1, {
        "memprobe/overhead/sample_seconds": 1e-5,
        "memprobe/process/rss_bytes": 8e7 + 4096 * (i % 3),
        "memprobe/tracemalloc/filtered_bytes": level + per_step * i + 8 * (i * 7 % 5)})
        for i in range(n)]


def test_tens_of_bytes_per_step_is_growing_slightly_not_a_leak() -> None:
    report = memprobe.analyze_samples(_filtered(40))
    v = report.get("tracemalloc/filtered_bytes")
    assert v.status == "slight" and not report.has_leak, v.describe()
    assert "growing slightly" in v.describe() and "B per sample" in v.describe()
    assert v.slope_per_step == pytest.approx(40, rel=0.1)
    # 1 KiB per step (50 KiB, 0.06% of the 80 MB process) is slight too; 16 KiB per
    # step (800 KiB, 1%) is a leak; so is 40 B/step with no floor.
    assert memprobe.analyze_samples(_filtered(1024)).get(v.metric).status == "slight"
    assert memprobe.analyze_samples(_filtered(16384)).get(v.metric).leaking
    assert memprobe.analyze_samples(_filtered(40), min_growth_bytes=0, min_growth_fraction=0,
                                    min_rate_fraction_per_hour=0).get(v.metric).leaking


def test_the_floor_grows_with_the_process_size() -> None:
    # 1 KiB per step over 50 steps is 50 KiB: a leak in an 80 MB process, slight in 800 GB.
    small = memprobe.analyze_samples(_filtered(1024), min_growth_fraction=1e-4)
    huge = memprobe.analyze_samples(_filtered(1024), min_growth_fraction=1e-6 * 1e6)
    assert small.has_leak and not huge.has_leak


def test_rate_per_hour_beside_the_rate_per_sample() -> None:
    v = memprobe.analyze_samples(_filtered(2048)).get("tracemalloc/filtered_bytes")
    assert v.step == "sample"
    assert v.rate_per_hour == pytest.approx(2048 / 2 * 3600, rel=0.05)
    assert "KiB per sample (+" in v.describe() and "MiB/hour" in v.describe()


def test_leak_options_are_a_public_set_the_prober_checks() -> None:
    assert {"warmup", "thresholds", "min_growth_bytes", "metrics"} <= memprobe.LEAK_OPTIONS
    with pytest.raises(memprobe.ConfigError) as err:
        memprobe.analyze_samples(_filtered(0), warmpu=3)
    assert err.value.option == "warmpu"
    with pytest.raises(memprobe.ConfigError, match="min_growth_bytes"):
        memprobe.analyze_samples(_filtered(0), min_growth_bytes=-1)
    with pytest.raises(memprobe.ConfigError, match="did you mean 'min_growth_bytes'"):
        memprobe.Prober(["process"], leak_options={"min_growth_byte": 1}, load_entrypoints=False)


# -- kinds of growth ---------------------------------------------------------------------


def _process(n: int = 80, **rates: float) -> list[memprobe.Sample]:
    """A process whose metrics grow at ``rates`` per step (names with / as __), with a wobble."""
    base = {"process/rss_bytes": 9e7, "process/num_fds": 12, "process/shared_bytes": 2e7,
            "process/vms_bytes": 4e8}
    for name in rates:
        base.setdefault(name.replace("__", "/"), 1e6)
    out = []
    for i in range(n):
        values: dict[str, float] = {"memprobe/overhead/sample_seconds": 1e-5}
        for m, b in base.items():
            r = rates.get(m.replace("/", "__"), 0.0)
            wobble = 4096 * ((i * 7) % 3) if m.endswith("_bytes") else 0
            values[f"memprobe/{m}"] = b + r * i + wobble
        out.append(memprobe.Sample(1000.0 + i, i, 1, values))
    return out


@pytest.mark.parametrize(("rates", "kind"), [
    ({"process__rss_bytes": 1e5, "tracemalloc__filtered_bytes": 1e5}, "python"),
    ({"process__rss_bytes": 1e5, "objects__total_count": 100}, "objects"),
    ({"process__rss_bytes": 1e5, "malloc__in_use_bytes": 1e5, "tracemalloc__filtered_bytes": 0},
     "native"),
    ({"process__rss_bytes": 1e5, "malloc__in_use_bytes": 0, "malloc__free_bytes": 1e5},
     "fragmentation"),
    ({"process__num_fds": 1, "process__rss_bytes": 1e4}, "fds"),
    ({"process__rss_bytes": 1e5, "process__shared_bytes": 1e5}, "mmap"),
    ({"process__rss_bytes": 1e5, "smaps__file_bytes": 1e5, "malloc__in_use_bytes": 0}, "mmap"),
    ({"process__vms_bytes": 1e6}, "mmap"),
    ({"process__rss_bytes": 1e5, "tracemalloc__filtered_bytes": 0}, "native"),
])
def test_each_kind_of_growth_is_told_apart(rates: dict[str, float], kind: str) -> None:
    report = memprobe.analyze_samples(_process(**rates))
    assert report.has_leak and report.kind == kind, str(report)
    assert report.culprit == memprobe.KINDS[kind] or report.culprit
    assert all(v.kind for v in report.leaking), str(report)


def test_rss_with_no_probe_to_explain_it_says_what_to_add() -> None:
    report = memprobe.analyze_samples(_process(process__rss_bytes=1e5))
    rss = report.get("process/rss_bytes")
    assert rss.leaking and rss.kind is None and "tracemalloc" in rss.note


def test_a_chain_site_reads_as_caller_then_library_line() -> None:
    key = "memprobe/tracemalloc/top/my_env.py:26--numpy/_core/numeric.py:232/size_bytes"
    samples = [memprobe.Sample(1.0 + i, i, 1, {
        "memprobe/overhead/sample_seconds": 1e-5, key: 1000.0 + 32768 * i,
        "memprobe/tracemalloc/filtered_bytes": 1e6 + 32768 * i}) for i in range(40)]
    report = memprobe.analyze_samples(samples)
    assert report.sites[0].site == "my_env.py:26 → numpy/_core/numeric.py:232"
    assert report.culprit == "my_env.py:26 → numpy/_core/numeric.py:232"


def test_tracemalloc_own_memory_is_not_the_users_rss() -> None:
    # rss grows exactly as tracemalloc's own tables (tracemalloc/overhead_bytes) do:
    # memprobe's memory, not the user's, so the resident size does not leak.
    samples = [memprobe.Sample(1.0 + i, i, 1, {
        "memprobe/overhead/sample_seconds": 1e-5,
        "memprobe/process/rss_bytes": 9e7 + 65536 * i + 4096 * (i % 3),
        "memprobe/tracemalloc/overhead_bytes": 1e6 + 65536 * i,
        "memprobe/tracemalloc/filtered_bytes": 5e6 + 8 * (i % 5)}) for i in range(60)]
    report = memprobe.analyze_samples(samples)
    assert not report.has_leak, report
    leaking = [dict(s.values, **{"memprobe/process/rss_bytes": s.values[
        "memprobe/process/rss_bytes"] + 65536 * s.step}) for s in samples]
    again = memprobe.analyze_samples(
        [memprobe.Sample(s.time_seconds, s.step, 1, v) for s, v in zip(samples, leaking)])
    assert again.get("process/rss_bytes").leaking and again.kind == "native", again


def _traced_run(rss_per_step: float, own_per_step: float, user_per_step: float,
                seed: int, n: int = 200) -> memprobe.Report:
    """A run sampled with tracemalloc: memprobe's own traced bytes (traced less
    filtered) grow by ``own_per_step``, the user's by ``user_per_step``."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        own = 2e6 + own_per_step * i
        user = 4e6 + user_per_step * i
        samples.append(memprobe.Sample(float(i), i, 1, {
            "memprobe/process/rss_bytes": 60e6 + rss_per_step * i + rng.gauss(0, 2000),
            "memprobe/tracemalloc/traced_bytes": own + user,
            "memprobe/tracemalloc/filtered_bytes": user,
            "memprobe/tracemalloc/overhead_bytes": 1e5 + 0.1 * own_per_step * i,
        }))
    return memprobe.analyze_samples(samples)


@settings(max_examples=25, deadline=None)
@given(own=st.floats(500, 20_000), seed=st.integers(0, 2**16))
def test_memprobe_own_traced_memory_is_not_the_users_leak(own: float, seed: int) -> None:
    """The resident size is judged less memprobe's own memory (its traced blocks, which
    its filters leave out, and tracemalloc's), and within what that memory grew by."""
    report = _traced_run(rss_per_step=1.1 * own, own_per_step=own, user_per_step=0, seed=seed)
    assert not report.has_leak, report


@settings(max_examples=25, deadline=None)
@given(user=st.floats(3000, 20_000), own=st.floats(0, 2000), seed=st.integers(0, 2**16))
def test_the_users_python_leak_is_found_beside_memprobe_own_growth(
        user: float, own: float, seed: int) -> None:
    report = _traced_run(rss_per_step=user + own, own_per_step=own, user_per_step=user,
                         seed=seed)
    assert report.has_leak and report.kind == "python", report
    assert "process/rss_bytes" in report.leaking_metrics


def test_a_count_of_objects_gives_way_to_the_native_bytes_they_hold() -> None:
    """Kept tensors served from freed heap: rss flat, live objects and malloc's bytes in
    use grow. The report's kind is the bytes' (native), not the count's."""
    objects = memprobe.Verdict("memprobe/objects/total_count", "leak", 8.0, 8.0, 8.0, None,
                               40, 5, kind="objects", unit="objects")
    in_use = memprobe.Verdict("memprobe/malloc/in_use_bytes", "leak", 16384.0, 16000.0,
                              17000.0, None, 40, 5, kind="native", unit="bytes")
    report = memprobe.Report({v.key: v for v in (objects, in_use)}, prefix="memprobe")
    assert report.kind == "native"
    assert [v.key for v in report.leaking] == [in_use.key, objects.key]


def test_memrays_python_frames_alone_say_how_to_name_the_c_function() -> None:
    """memray's sites read without their C stacks (the probe's default) name the user's
    line; the note says which option names the C function, and only then."""
    from memprobe.leak._kinds import NATIVE_TRACES_HINT, _native
    from memprobe.leak._windows import WindowEvidence

    python_only = WindowEvidence("memray", 3, 2.0, 65536.0, (("nhelper.py:43", 65536.0),))
    kind, culprits, note = _native("process/rss_bytes", 65536.0, (python_only,), "")
    assert (kind, culprits) == ("native", ("nhelper.py:43",))
    assert NATIVE_TRACES_HINT in note
    with_c = WindowEvidence("memray", 3, 2.0, 65536.0, (("nhelper.py:43--leaky_alloc", 65536.0),))
    kind, culprits, note = _native("process/rss_bytes", 65536.0, (with_c,), "")
    assert culprits == ("nhelper.py:43 → leaky_alloc",) and NATIVE_TRACES_HINT not in note


def test_the_alarms_capture_outweighs_short_windows_that_caught_a_resize() -> None:
    """A native leak whose addresses the user's line keeps in a list: two short windows,
    one of them holding the list's resize (tens of KiB in one block at the user's
    line), look like Python's growth; the capture's longer view says the kept bytes are
    a small share of it. The capture decides: native, held at the user's line."""
    from memprobe.leak._kinds import classify
    from memprobe.leak._windows import WindowEvidence

    rss = memprobe.Verdict("memprobe/process/rss_bytes", "leak", 48000.0, 40000.0, 56000.0,
                           3.0e9, 200, 0, unit="bytes", prefix="memprobe")
    blocks = memprobe.Verdict("memprobe/gc/allocated_blocks", "leak", 60.0, 50.0, 70.0,
                              2.0e6, 200, 0, unit="count", prefix="memprobe")
    by_metric = {v.metric: v for v in (rss, blocks)}
    resize = WindowEvidence("tracemalloc", 2, 1.0, 110000.0, (("app.py:12", 29000.0),))
    capture = WindowEvidence("tracemalloc", 1, 6.0, 12000.0, (("app.py:12", 1500.0),),
                             source="capture")
    kind, culprits, note = classify("process/rss_bytes", by_metric, (), (), (resize, capture))
    assert kind == "native" and culprits[0] == "app.py:12", (kind, culprits, note)
    kind, _, _ = classify("process/rss_bytes", by_metric, (), (), (resize,))
    assert kind == "python"  # the windows alone


def test_windows_that_explain_a_growth_name_the_sites_growing_slightly_when_none_leaks(
        ) -> None:
    """A Python leak spread over a library's lines (``re.compile``), none of them growing
    past the floor, whose windows account for the growth but list no site of their own:
    the sites growing slightly name it, as they do without windows."""
    from memprobe.leak._kinds import classify
    from memprobe.leak._windows import WindowEvidence

    rss = memprobe.Verdict("memprobe/process/rss_bytes", "leak", 48000.0, 40000.0, 56000.0,
                           3.0e9, 200, 0, unit="bytes", prefix="memprobe")
    by_metric = {rss.metric: rss}
    windows = (WindowEvidence("tracemalloc", 4, 1.0, 50000.0, ()),)
    holders = ("app.py:5 → re/_compiler.py:761", "app.py:5 → re/_parser.py:449")
    kind, culprits, note = classify("process/rss_bytes", by_metric, (), (), windows,
                                    holders=holders)
    assert kind == "python", (kind, culprits, note)
    assert culprits == holders
