"""The time to out-of-memory: the nearest limit (cgroup, Ray's memory monitor, the
machine), the forecast, and the capture it opens before the kill."""

from __future__ import annotations

import mmap
import pathlib

import psutil
import pytest

import memprobe
from memprobe.leak import _oom


def _cgroup_v2(tmp_path: pathlib.Path, limits: dict[str, tuple[str, int]]) -> pathlib.Path:
    """A cgroup v2 tree under ``tmp_path``: {relative dir: (memory.max, memory.current)};
    the process is in the deepest one."""
    root = tmp_path / "cgroup"
    for rel, (limit, used) in limits.items():
        d = root / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.max").write_text(limit + "\n")
        (d / "memory.current").write_text(f"{used}\n")
    deepest = max(limits, key=len)
    (tmp_path / "proc_cgroup").write_text(f"0::/{deepest}\n")
    return root


def test_the_nearest_cgroup_limit_up_the_path_applies(tmp_path) -> None:
    root = _cgroup_v2(tmp_path, {"a": ("1000000", 400_000), "a/b": ("max", 300_000),
                                 "a/b/c": ("5000000", 100_000)})
    h = _oom.cgroup_headroom(root, tmp_path / "proc_cgroup")
    assert h == memprobe.Headroom(600_000, 1_000_000, "cgroup")  # a's, not c's


def test_no_cgroup_limit_is_none(tmp_path) -> None:
    root = _cgroup_v2(tmp_path, {"x": ("max", 10)})
    assert _oom.cgroup_headroom(root, tmp_path / "proc_cgroup") is None
    assert _oom.cgroup_headroom(root, tmp_path / "missing") is None


def test_cgroup_v1_limit(tmp_path) -> None:
    d = tmp_path / "cgroup" / "memory" / "job"
    d.mkdir(parents=True)
    (d / "memory.limit_in_bytes").write_text("2000000\n")
    (d / "memory.usage_in_bytes").write_text("500000\n")
    (tmp_path / "proc_cgroup").write_text("4:memory:/job\n3:cpu,cpuacct:/job\n")
    h = _oom.cgroup_headroom(tmp_path / "cgroup", tmp_path / "proc_cgroup")
    assert h == memprobe.Headroom(1_500_000, 2_000_000, "cgroup")


def test_this_process_headroom_is_at_most_the_machines_available_memory() -> None:
    h = memprobe.oom_headroom()
    assert h is not None and h.source in ("cgroup", "machine")
    assert 0 <= h.bytes <= psutil.virtual_memory().total


def test_rays_memory_monitor_threshold(monkeypatch) -> None:
    vm = psutil.virtual_memory()
    monkeypatch.setenv("RAY_memory_usage_threshold", "0.5")
    h = memprobe.oom_headroom(ray=True)
    used = vm.total - vm.available
    if used < 0.5 * vm.total:  # a machine over half full is already past it
        assert h.source in ("ray", "cgroup") and h.bytes < vm.available
    monkeypatch.setenv("RAY_memory_usage_threshold", "1.5")
    with pytest.raises(memprobe.ConfigError, match="RAY_memory_usage_threshold"):
        _oom.ray_threshold()


def _fresh_pages(size: int) -> mmap.mmap:
    """``size`` bytes of new resident memory: an anonymous mapping, touched (the heap
    may hold memory earlier tests freed, which a bytearray would reuse)."""
    m = mmap.mmap(-1, size)
    for i in range(0, size, mmap.PAGESIZE):
        m[i] = 1
    return m


def _step_bytes() -> int:
    """A leak per sample that passes the alarm's floor (0.5% of the resident size) within
    about 60 samples: 64 KiB in a process of 500 MiB, 1 MiB in a pytest worker of 3 GiB
    that imported torch."""
    rss = psutil.Process().memory_info().rss
    return max(64 * 1024, int(rss * 1e-4 // mmap.PAGESIZE + 1) * mmap.PAGESIZE)


def test_hours_to_oom() -> None:
    assert _oom.hours_to_oom(3 << 30, 1 << 30) == 3.0
    assert _oom.hours_to_oom(1 << 30, 0.0) is None
    assert _oom.hours_to_oom(1 << 30, None) is None


def test_a_forecast_under_the_threshold_opens_the_capture_before_the_alarm() -> None:
    """``oom_capture_hours`` above any forecast: the first check that sees rss growing
    opens the capture, before the confirmations the alarm needs."""
    fired: list[memprobe.Verdict] = []
    kept = []
    with memprobe.Prober(["process"], on_leak=fired.append, leak_check_every=10,
                         leak_confirmations=50, capture_on_leak={"duration_seconds": 0.2},
                         oom_capture_hours=1e9) as prober:
        alarm = prober.alarm
        assert alarm is not None and alarm.oom_capture_hours == 1e9
        step_bytes = _step_bytes()
        for i in range(200):
            kept.append(_fresh_pages(step_bytes))
            prober.sample(step=i)
            if alarm.capturing:
                break
        opened = alarm.capturing  # stopping the Prober abandons it
        rss = prober.report().get("process/rss_bytes")
    assert opened and not fired, fired  # opened before the alarm: 50 confirmations
    assert rss.hours_to_oom is not None and rss.hours_to_oom > 0
    assert "out of memory in" in rss.describe()


def test_a_warm_up_under_the_floor_gets_no_forecast() -> None:
    """A healthy process's warm-up: 2 MiB over its first 100 samples (under the 0.5%
    floor of a 500 MiB process), then flat. Its first checks judge it growing slightly
    at a rate a leak would have (replayed as fast as it samples: hundreds of GiB/h), and
    forecast with that rate it ran out of memory within minutes: the alert rule of
    docs/cluster.md paged for healthy RLlib EnvRunners. No forecast on "slight"; a
    leak of the same series gets one."""
    import random

    from series_shapes import LEVEL_BYTES, MIB, allocator_noise, leaking, replay_plugin

    rng = random.Random(5)
    warm = [LEVEL_BYTES + 2 * MIB * min(i, 100) / 100 + allocator_noise(rng) / 8
            for i in range(400)]

    def checks(series: list[float]) -> list[memprobe.Verdict]:
        pm = memprobe.get_plugin_manager(load_entrypoints=False, disable=["process"])
        pm.register(replay_plugin(series, "process", "rss_bytes"))
        seen = []
        with memprobe.Prober(["process"], plugin_manager=pm, history=200,
                             on_leak=lambda v: None, leak_check_every=20,
                             capture_on_leak=False) as prober:
            alarm = prober.alarm
            latest = None
            for i in range(len(series)):
                prober.sample(step=i)
                if alarm.latest is not latest:
                    latest = alarm.latest
                    seen.append(latest.get("process/rss_bytes"))
        return seen

    seen = checks(warm)
    assert any(v.status == "slight" and (v.rate_per_hour or 0) > 0 for v in seen), \
        [v.describe() for v in seen]
    assert all(v.hours_to_oom is None for v in seen), [v.describe() for v in seen]
    leak = checks(leaking(64 * 1024, 400))
    assert any(v.status == "leak" and v.hours_to_oom is not None for v in leak), \
        [v.describe() for v in leak]


def test_memprobe_report_on_the_file_gives_the_forecast_the_process_made(tmp_path) -> None:
    """The check's forecast is in the sample after it (``leak/hours_to_oom``): ``memprobe
    report`` shows it beside the rate, against the process's own limit."""
    import subprocess
    import sys

    path = tmp_path / "run.jsonl"
    kept = []
    step_bytes = _step_bytes()
    with memprobe.Prober(["process"], sink=memprobe.JsonlSink(str(path)),
                         on_leak=lambda v: None, capture_on_leak=False) as prober:
        for i in range(300):
            kept.append(_fresh_pages(step_bytes))
            prober.sample(step=i)
    samples = memprobe.read_samples(str(path))
    assert any(s.values.get("memprobe/leak/hours_to_oom", -1) > 0 for s in samples)
    rss = memprobe.analyze_samples(samples).get("process/rss_bytes")
    assert rss.status == "leak" and rss.hours_to_oom is not None and rss.hours_to_oom > 0
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "out of memory in" in out, out


@pytest.mark.parametrize("bad", [-1, "1", True, float("nan")])
def test_a_bad_oom_capture_hours_names_the_option(bad) -> None:
    with pytest.raises(memprobe.ConfigError) as err:
        memprobe.Prober(["gc"], oom_capture_hours=bad)
    assert err.value.option == "oom_capture_hours"
