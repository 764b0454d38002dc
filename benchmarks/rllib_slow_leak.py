"""RLlib with the defaults and a slow leak of a few KiB per episode (issue 28).

Run: ``flock /tmp/ray.lock python benchmarks/rllib_slow_leak.py [--kib 2 5 20]
[--iterations 40] [--stop-at-alarm 5 20]``.

PPO on CartPole (1 remote EnvRunner, 2,000 steps per iteration,
``MemoryProbeCallback.configure(jsonl=DIR)``, every other option at its default)
with an env that keeps ``bytearray(KiB * 1024)`` at every reset. Prints, per
leak: the iteration of the first live alarm (``memprobe/leak/suspect`` of the
EnvRunner), the live ``process/rss_bytes`` rate and ``hours_to_oom`` then, and
``memprobe report``'s verdict on the EnvRunner's JSONL at the end. Goal: 5 and
20 KiB alarm within 40 iterations; 2 KiB at least "growing slightly" with its rate.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import warnings

#: The test envs (tests/rllib/memprobe_test_leaky_env.py), importable by the EnvRunners.
ENVS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                     "rllib"))
sys.path.insert(0, ENVS)


def run(kib: int, iterations: int, stop_at_alarm: bool = False) -> dict:
    from memprobe_test_leaky_env import EpisodeLeakCartPole
    from ray.rllib.algorithms.ppo import PPOConfig

    import memprobe
    from memprobe_rllib import MemoryProbeCallback

    logdir = tempfile.mkdtemp(prefix=f"slowleak{kib}_")
    cls = MemoryProbeCallback.configure(jsonl=logdir)
    config = (PPOConfig().environment(EpisodeLeakCartPole, env_config={"kib": kib})
              .env_runners(num_env_runners=1)
              .training(train_batch_size=2000, minibatch_size=256, num_epochs=1)
              .callbacks(cls).debugging(log_level="ERROR", seed=0))
    algo = config.build_algo()
    first = None
    rows = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for it in range(1, iterations + 1):
                er = algo.train()["env_runners"]
                row = {k: er.get(f"memprobe/leak/{k}") for k in
                       ("suspect", "process/rss_bytes/rate_per_hour", "hours_to_oom")}
                rows.append(row)
                # == 1: a key RLlib reduced over no value reads NaN, which is truthy.
                if first is None and row["suspect"] == 1:
                    first = it
                    if stop_at_alarm:
                        break
    finally:
        algo.stop()
    files = [f for f in glob.glob(os.path.join(logdir, "**", "*.jsonl"), recursive=True)
             if "env_runner" in os.path.basename(f)]
    verdicts = []
    for f in files:
        report = memprobe.analyze_samples(memprobe.read_samples(f))
        v = report.get("process/rss_bytes")
        if v is not None:
            verdicts.append(v)
    nan = sum(1 for r in rows if any(v is None or v != v for v in r.values()))
    return {"kib": kib, "first": first, "iterations": len(rows), "last": rows[-1], "nan": nan,
            "at_alarm": rows[first - 1] if first else None,
            "report": [v.describe() for v in verdicts], "verdicts": verdicts}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kib", type=int, nargs="+", default=[2, 5, 20])
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--stop-at-alarm", type=int, nargs="*", default=[],
                    help="leaks (KiB) whose run stops at the first live alarm")
    args = ap.parse_args()
    import ray

    path = os.pathsep.join(p for p in (ENVS, os.environ.get("PYTHONPATH")) if p)
    # address="local": a new instance, never a cluster another program left running.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    print("| leak (KiB/episode) | first live alarm (iteration) | live rss rate (MiB/h) "
          "| hours_to_oom | memprobe report on the EnvRunner's JSONL |")
    print("|---|---|---|---|---|")
    for kib in args.kib:
        r = run(kib, args.iterations, stop_at_alarm=kib in args.stop_at_alarm)
        row = r["at_alarm"] or r["last"]
        rate = (row["process/rss_bytes/rate_per_hour"] or 0) / (1 << 20)
        print(f"| {kib} | {r['first'] or '-'} of {r['iterations']} | {rate:+.1f} | "
              f"{row['hours_to_oom']:.1f} | {'; '.join(r['report'])} |", flush=True)
        if r["nan"]:
            print(f"  ({r['nan']} iterations had a leak key missing or NaN)", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
