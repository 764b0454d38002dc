"""The exported leak verdict is the leak alarm's: one leaking check is not a suspect,
``leak_confirmations`` leaking checks in a row are.

The sampler runs in this process (started by hand, as in a driver): the test grows
the process's resident memory in step with the sampler's samples, window by window.
Each check judges every sample so far (the alarm's tiers span the whole run), so a
flat window then a ramp is not yet a leak; two ramps are, and the leak is confirmed once
it has gone on over 1.5 times the scale it was first judged on (``PERSISTENCE``).
"""

from __future__ import annotations

import time

import pytest

from memprobe_ray import _worker, start_sampler, stop_sampler

ray = pytest.importorskip("ray")

#: Samples per check (checks are at least 40 samples apart).
WINDOW = 40
#: Windows whose samples grow rss by 1 MiB each: every one after the first.
RAMPS = range(1, 16)


def test_one_leaking_check_exports_no_suspect_and_confirmed_checks_do(ray_cluster, prometheus):
    start_sampler(
        identity=lambda: ("driver", "alarmcheck", ""), interval_seconds=0.1, history=WINDOW,
        leak_check_every=WINDOW, leak_confirmations=2, capture_on_leak=False,
        leak_options={"warmup": None, "metrics": ["process/rss_bytes"],
                      "thresholds": {"process/rss_bytes": 200_000}})
    sampler = _worker._SAMPLER
    kept: list[bytes] = []
    checks: list[tuple[float, str, bool]] = []  # (time seen, rss status, alarmed)
    suspect = 'ray_memprobe_leak_suspect{name="alarmcheck"}'
    t0 = time.time()
    try:
        seen = last = None
        deadline = time.monotonic() + 120
        while not (checks and checks[-1][2]) and len(checks) < 14:
            assert time.monotonic() < deadline, checks
            n = sampler.samples
            if n != last:
                last = n
                if n // WINDOW in RAMPS:  # the next sample is in a ramp window
                    kept.append(b"\x01" * (1 << 20))
            alarm = sampler.prober.alarm if sampler.prober is not None else None
            report = alarm.latest if alarm is not None else None
            if report is not None and report is not seen:
                seen = report
                rss = report.verdicts["memprobe/process/rss_bytes"]
                checks.append((time.time(), rss.status, bool(alarm.alarmed)))
            time.sleep(0.01)
        # Window 0 (flat), then ramps: flat then one ramp is not yet a leak (the kink
        # widens the interval); the third check is the first leaking one, alone: no
        # suspect; the leaking checks after it confirm it once it has persisted.
        leaking = [c[1] == "leak" for c in checks]
        assert leaking[:3] == [False, False, True], checks
        assert checks[-1][2] and all(leaking[2:]), checks
        assert [c[2] for c in checks[:-1]] == [False] * (len(checks) - 1), checks
        assert len(checks) >= 4, checks  # one leaking check alone is no suspect
        prometheus.wait_for(f"{suspect} == 1", lambda r: len(r) == 1, timeout=20)
        rate = prometheus.query('ray_memprobe_leak_rate_per_hour_bytes{name="alarmcheck"}')
        assert float(rate[0]["value"][1]) > 1e9, rate  # 2 MiB per 0.1 s
        # Every scrape before the confirming check read 0, the lone leaking check's included.
        confirmed = checks[-1][0]
        series = prometheus.query_range(suspect, seconds=time.time() - t0 + 5)
        points = [(float(t), v) for s in series for t, v in s["values"]]
        before = [v for t, v in points if t < confirmed]
        assert len(before) >= 3 and set(before) == {"0"}, points  # then 1: the wait above
    finally:
        stop_sampler()
        kept.clear()


def test_a_count_leak_is_exported_under_its_count_gauge_not_the_bytes_one(ray_cluster,
                                                                           prometheus):
    """An fd leak's rate is in fds per hour: ``memprobe_leak_count_rate_per_hour``."""
    start_sampler(
        identity=lambda: ("driver", "fdleak", ""), probes=["process"], interval_seconds=0.05,
        history=WINDOW, leak_check_every=WINDOW, leak_confirmations=2, capture_on_leak=False,
        leak_options={"warmup": None, "metrics": ["process/num_fds"]})
    sampler = _worker._SAMPLER
    files = []
    try:
        last = None
        deadline = time.monotonic() + 60
        while sampler.prober is None or not sampler.prober.alarm.alarmed:
            assert time.monotonic() < deadline
            if sampler.samples != last:
                last = sampler.samples
                files.append(open(__file__, "rb"))  # the leak: never closed
            time.sleep(0.005)
        assert sampler.prober.alarm.alarmed == {"memprobe/process/num_fds"}
        counted = prometheus.wait_for(
            'ray_memprobe_leak_count_rate_per_hour{name="fdleak"} > 0',
            lambda r: len(r) == 1, timeout=20)
        assert counted[0]["metric"]["metric"] == "process/num_fds"
        assert float(counted[0]["value"][1]) > 3600  # some 20 fds a second
        suspect = prometheus.query('ray_memprobe_leak_suspect{name="fdleak"}')
        assert [r["value"][1] for r in suspect] == ["1"]
        in_bytes = prometheus.query('ray_memprobe_leak_rate_per_hour_bytes{name="fdleak"}')
        assert [r["value"][1] for r in in_bytes] == ["0"]
    finally:
        stop_sampler()
        for f in files:
            f.close()
