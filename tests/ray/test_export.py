"""Actors probed by the setup hook and a driver's Prober, through Ray's metrics to Prometheus."""

from __future__ import annotations

import threading
import time

import pytest

import memprobe
from memprobe_ray import RayMetricsSink, dashboard

ray = pytest.importorskip("ray")



@ray.remote(num_cpus=0.25)
class Steady:
    def ready(self) -> bool:
        return True


@ray.remote(num_cpus=0.25)
class Leaky:
    """Keeps 1 MiB more every 0.1 s (fresh pages, written: rss grows), up to 800 MiB."""

    def __init__(self) -> None:
        self.kept: list[bytes] = []
        threading.Thread(target=self._leak, daemon=True).start()

    def _leak(self) -> None:
        while len(self.kept) < 800:
            self.kept.append(b"\x01" * (1 << 20))
            time.sleep(0.1)

    def ready(self) -> bool:
        return True


def _labels(result: list[dict]) -> list[dict]:
    return [r["metric"] for r in result]


def test_driver_and_actors_in_prometheus_and_leaker_ranked_first(ray_cluster, prometheus):
    steady = [Steady.options(name=f"steady-{i}").remote() for i in range(2)]
    leaky = Leaky.options(name="leaky-0").remote()
    ray.get([a.ready.remote() for a in [*steady, leaky]])
    sink = RayMetricsSink(role="driver", name="pytest")
    prober = memprobe.Prober(["process", "gc", "tracemalloc"], sink=sink)
    sink.bind(prober)
    done = threading.Event()

    def sample_driver() -> None:  # the driver's series, recorded until the test ends
        while not done.wait(0.5):
            prober.sample()

    driver = threading.Thread(target=sample_driver, daemon=True)
    try:
        with prober:
            driver.start()
            time.sleep(20)
            rss = prometheus.wait_for(
                "ray_memprobe_process_rss_bytes",
                lambda r: {"driver", "actor"} <= {m["role"] for m in _labels(r)}
                and {"Steady", "Leaky"} <= {m["name"] for m in _labels(r)},
            )
            for m in _labels(rss):
                assert m["node"] in (ray_cluster.head_id, ray_cluster.worker_id), m
                assert "pid" not in m
            names = {(m["name"], m.get("index", "")) for m in _labels(rss)}
            assert {("Steady", "steady-0"), ("Steady", "steady-1"), ("Leaky", "leaky-0")} <= names

            # The dashboard's top-k query ranks the leaking actor first.
            topk = dict(dashboard.queries(variables={"window": "20s", "k": "3"}))
            expr = next(q for t, q in topk.items() if t.startswith("Top "))
            ranked = prometheus.query(f"sort_desc({expr})")
            assert ranked, expr
            assert ranked[0]["metric"]["name"] == "Leaky", ranked

            # Its own leak alarm, run in the actor's process, confirms it; the steady
            # actors' alarms never do.
            prometheus.wait_for('ray_memprobe_leak_suspect{name="Leaky"} == 1',
                                lambda r: len(r) == 1, timeout=60)
            rate = prometheus.query('ray_memprobe_leak_rate_per_hour_bytes{name="Leaky"}')
            assert float(rate[0]["value"][1]) > 1e8  # 10 MiB/s, far above 100 MB/hour
            quiet = prometheus.query(
                'max_over_time(ray_memprobe_leak_suspect{name="Steady"}[5m])')
            assert len(quiet) == 2 and all(r["value"][1] == "0" for r in quiet), quiet
            # The alarm's capture names the line that keeps the memory: the culprits panel.
            panels = dict(dashboard.queries(variables={"window": "30s"}))
            culprits = next(q for t, q in panels.items() if t.startswith("Leak culprits"))
            named = prometheus.wait_for(culprits, lambda r: any(
                m["metric"]["name"] == "Leaky" and "test_export.py" in m["metric"]["culprit"]
                for m in r), timeout=60)
            assert all(float(m["value"][1]) >= 1 for m in named), named

            # Python bytes: the driver's tracemalloc probe.
            traced = prometheus.wait_for('ray_memprobe_tracemalloc_traced_bytes{role="driver"}',
                                         lambda r: len(r) == 1)
            assert float(traced[0]["value"][1]) > 0

            # Counters only go up, series by series, point by point.
            series = prometheus.query_range(
                '{__name__=~"ray_memprobe_.*_total"}', seconds=30)
            assert series
            for s in series:
                values = [float(v) for _, v in s["values"]]
                assert values == sorted(values), s["metric"]
                assert s["metric"]["__name__"].endswith("_total")
            # ...and every series is a gauge or counter with a name Prometheus keeps.
            every = prometheus.query('{__name__=~"ray_memprobe_.*"}')
            names = {m["__name__"] for m in _labels(every)}
            for name in names:
                assert not name.endswith(("_count", "_sum", "_bucket")), name
            done.set()
            driver.join()
    finally:
        done.set()
        sink.close()
        for a in [*steady, leaky]:
            ray.kill(a)


def test_every_dashboard_query_runs_and_the_panels_have_data(ray_cluster, prometheus):
    """Runs after the test above: its series are still in Prometheus."""
    empty = []
    for title, expr in dashboard.queries(variables={"window": "30s"}):
        result = prometheus.query(expr)  # a bad PromQL expression fails here (HTTP 400)
        if not result:
            empty.append((title, expr))
    assert empty == []


def test_probed_decorator_starts_one_sampler_for_a_class_and_a_function(ray_cluster, prometheus):
    """In the driver (no setup hook there), named by the ``identity`` option."""
    from memprobe_ray import probed, stop_sampler

    @probed(interval_seconds=0.2, identity=lambda: ("actor", "Decorated", "d0"))
    class Decorated:
        def __init__(self, x: int) -> None:
            self.x = x

    @probed(interval_seconds=0.2, identity=lambda: ("task", "never", ""))
    def work(x: int) -> int:
        return x + 1

    try:
        assert Decorated(3).x == 3
        assert work(1) == 2  # the class's sampler already runs: one per process
        r = prometheus.wait_for('ray_memprobe_process_rss_bytes{name=~"Decorated|never"}',
                                lambda r: len(r) >= 1)
        assert [m["metric"]["name"] for m in r] == ["Decorated"]
        assert r[0]["metric"]["index"] == "d0" and r[0]["metric"]["role"] == "actor"
    finally:
        stop_sampler()


def test_a_pooled_task_worker_is_named_by_the_task_it_runs_now(ray_cluster, prometheus):
    """Ray reuses a task worker for other tasks: its series follow the current task."""
    from memprobe_ray import start_sampler, stop_sampler

    running = ["pooled_first"]
    start_sampler(interval_seconds=0.2, identity=lambda: ("task", running[0], ""))
    try:
        query = 'ray_memprobe_process_rss_bytes{name=~"pooled_.*"}'
        prometheus.wait_for(query, lambda r: [m["metric"]["name"] for m in r] == ["pooled_first"])
        running[0] = "pooled_second"
        # The old series is no longer recorded, so Ray's agent drops it.
        r = prometheus.wait_for(query, lambda r: [m["metric"]["name"] for m in r]
                                == ["pooled_second"])
        assert r[0]["metric"]["role"] == "task"
    finally:
        stop_sampler()


def test_site_tags_are_capped_and_the_rest_summed_as_other(ray_cluster, prometheus):
    sink = RayMetricsSink(role="driver", name="sitecap", max_sites=2)
    prober = memprobe.Prober({"tracemalloc": {"top": 10}}, sink=sink)
    sink.bind(prober)
    query = 'ray_memprobe_tracemalloc_top_size_bytes{name="sitecap"}'
    kept = []
    seen: list[set] = []
    with prober:
        deadline = time.monotonic() + 60
        for i in range(1000):
            kept.append([bytearray(100 + i) for _ in range(50)])  # the largest site
            kept.append(str(i) * 1000)
            prober.sample(step=i)
            time.sleep(0.3)
            if i >= 20:
                seen.append({m["metric"]["site"] for m in prometheus.query(query)})
                if (len(seen) >= 10 and len(seen[-1]) == 3) or time.monotonic() > deadline:
                    break
        sites = {k for s in prober.history for k in s.values if "/top/" in k}
    sink.close()
    assert len(sites) > 2 * 10  # tracemalloc reported many sites (size and count each)
    # The 2 largest sites of each sample and "other", however many sites there were
    # (a site that leaves the top is no longer set, and Ray drops its series).
    assert len(seen[-1]) == 3 and "other" in seen[-1], seen
    assert any("test_export.py:" in s for s in seen[-1]), seen  # the growing lists
    assert all(len(s) <= 3 for s in seen), seen
