"""memprobe's Ray metrics export at scale: many probed actors on one machine.

Run: ``python benchmarks/ray_scale.py [--actors 8,32,64] [--samples 60]`` (needs
``pymemprobe[ray]``). It starts a local Ray with a metrics export port and, for
each actor count and each key mode, that many actors (``num_cpus=0``, so they
all fit), each with a :class:`memprobe.Prober` and a
:class:`memprobe_ray.RayMetricsSink`. Every actor takes ``--samples`` samples;
the cost of ``sink.write(sample)`` is timed alone, sample by sample, and the
median of each actor's medians is reported. Then the node's ``/metrics``
endpoint (what Prometheus scrapes) is read 5 times: the median scrape time, its
size, and the number of memprobe series in it.

Key modes:

* ``default``: the default probes (``process``, ``gc``): what the setup hook
  samples;
* ``sites``: plus ``tracemalloc`` with ``top=10``: allocation sites, of which the
  sink exports at most ``max_sites=5`` per metric, plus ``site="other"``.

Each mode runs in its own set of fresh actors, killed before the next.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time
import urllib.request

import ray

MODES = {
    "default": ["process", "gc"],
    "sites": ["process", "gc", {"tracemalloc": {"top": 10}}],
}


def _probes(spec: list) -> dict:
    out: dict = {}
    for p in spec:
        out.update(p if isinstance(p, dict) else {p: {}})
    return out


@ray.remote(num_cpus=0)
class Probed:
    def __init__(self, index: int) -> None:
        self.index = index

    def run(self, probes: list, samples: int) -> dict:
        import memprobe
        from memprobe_ray import RayMetricsSink

        sink = RayMetricsSink(role="bench", name="Probed", index=self.index)
        prober = memprobe.Prober(_probes(probes))
        sink.bind(prober)
        junk = []
        costs = []
        with prober:
            for i in range(samples):
                junk.append(bytearray(1000 + i))  # some allocation sites for tracemalloc
                prober.sample(step=i)
                sample = prober.history[-1]
                t0 = time.perf_counter()
                sink.write(sample)
                costs.append(time.perf_counter() - t0)
                time.sleep(0.02)
            keys = len(prober.history[-1].values)
        # Keep the series alive until the actor is killed, as the sampler does.
        threading.Thread(target=self._refresh, args=(sink,), daemon=True).start()
        return {"median_s": statistics.median(costs), "keys": keys}

    @staticmethod
    def _refresh(sink: object) -> None:
        while True:
            sink.refresh()  # type: ignore[attr-defined]
            time.sleep(0.5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> tuple[float, int, int]:
    times = []
    body = b""
    for _ in range(5):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            body = r.read()
        times.append(time.perf_counter() - t0)
    series = sum(1 for line in body.splitlines() if line.startswith(b"ray_memprobe_"))
    return statistics.median(times), len(body), series


def _wait_series(port: int, timeout: float = 180, gone: bool = False) -> None:
    """Until the number of memprobe series has not changed over 3 scrapes 2 s apart
    (``gone``: until there are none)."""
    deadline = time.monotonic() + timeout
    seen: list[int] = []
    while time.monotonic() < deadline:
        seen.append(_scrape(port)[2])
        if gone and seen[-1] == 0:
            return
        if not gone and len(seen) >= 3 and seen[-1] > 0 and len(set(seen[-3:])) == 1:
            return
        time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="8,32,64")
    parser.add_argument("--samples", type=int, default=60)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.actors.split(",")]
    os.environ.setdefault("RAY_metrics_report_interval_ms", "2000")
    port = _free_port()
    ray.init(include_dashboard=False, log_to_driver=False, _metrics_export_port=port)
    base_time, base_size, _ = _scrape(port)
    print(f"# ray {ray.__version__}, {os.cpu_count()} cores; empty scrape "
          f"{base_size / 1024:.0f} KiB in {base_time * 1e3:.1f} ms")
    print("| actors | mode | keys/sample | export µs/sample (median) | memprobe series "
          "| series/actor | scrape KiB | scrape ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        for mode, probes in MODES.items():
            actors = [Probed.remote(i) for i in range(n)]
            results = ray.get([a.run.remote(probes, args.samples) for a in actors])
            _wait_series(port)
            scrape_s, size, series = _scrape(port)
            export = statistics.median(r["median_s"] for r in results)
            keys = statistics.median(r["keys"] for r in results)
            print(f"| {n} | {mode} | {keys:.0f} | {export * 1e6:.0f} | {series} "
                  f"| {series / n:.1f} | {size / 1024:.0f} | {scrape_s * 1e3:.0f} |")
            sys.stdout.flush()
            for a in actors:
                ray.kill(a)
            _wait_series(port, gone=True)  # the dead workers' series leave the scrape
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
