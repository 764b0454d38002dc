"""The main job: PPO on CartPole-v1 with MemoryProbeCallback, memory per iteration.

Run ``python -m memprobe_rllib.demo [--iterations N] [--logdir DIR]``: new API
stack, one remote EnvRunner; prints a table of the driver's and the
EnvRunners' memory after each iteration, and where the JSONL logs went.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

MIB = 2**20
ROWS = [
    ("rss MiB", "process/rss_bytes", MIB),
    ("vms MiB", "process/vms_bytes", MIB),
    ("fds", "process/num_fds", 1),
    ("threads", "process/num_threads", 1),
    ("gc gen2 collections", "gc/gen2/collections_count", 1),
    ("gc seconds (iter)", "gc/collection_seconds", 1),
]


def _fmt(v: object, scale: float) -> str:
    if v is None:
        return "-"
    x = float(v) / scale  # type: ignore[arg-type]
    if scale == 1 and x != int(x):
        return f"{x:.4f}"
    return f"{x:.1f}" if scale != 1 or x != int(x) else f"{int(x)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memprobe_rllib.demo", description=__doc__)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--logdir", default=None, help="JSONL directory (default: a temp dir)")
    args = parser.parse_args(argv)
    logdir = os.path.abspath(args.logdir or tempfile.mkdtemp(prefix="memprobe-demo-"))

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    from memprobe_rllib import MemoryProbeCallback

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(train_batch_size=1000, minibatch_size=128, num_epochs=2)
        .callbacks(MemoryProbeCallback.configure(jsonl=logdir))
        .debugging(log_level="ERROR")
    )
    t0 = time.perf_counter()
    algo = config.build_algo()
    print(f"built PPO (new API stack, 1 remote EnvRunner) in {time.perf_counter() - t0:.1f} s")
    try:
        for it in range(1, args.iterations + 1):
            t1 = time.perf_counter()
            result = algo.train()
            er = result["env_runners"]
            print(f"\niteration {it}: {time.perf_counter() - t1:.1f} s, "
                  f"return {er.get('episode_return_mean', float('nan')):.1f}, "
                  f"env steps {er.get('num_env_steps_sampled_lifetime', 0)}")
            print(f"  {'metric':<22}{'driver':>12}{'EnvRunners':>12}{'max':>12}")
            for label, key, scale in ROWS:
                d = result.get(f"memprobe/driver/{key}")
                e = er.get(f"memprobe/{key}")
                m = er.get(f"memprobe/{key}_max")
                print(f"  {label:<22}{_fmt(d, scale):>12}{_fmt(e, scale):>12}{_fmt(m, scale):>12}")
    finally:
        algo.stop()
        ray.shutdown()
    files = sorted(os.listdir(logdir)) if os.path.isdir(logdir) else []
    print(f"\nJSONL logs (one per process) in {logdir}:")
    for f in files:
        print(f"  {f}")
    print("metrics are also in every algo.train() result: result['env_runners']"
          "['memprobe/process/rss_bytes'], result['memprobe/driver/process/rss_bytes'], ...")
    print(f"summarize them with: memprobe report {logdir}/*.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
