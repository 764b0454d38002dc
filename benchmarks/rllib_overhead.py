"""Env steps sampled per second by a PPO CartPole-v1 EnvRunner, with vs without memprobe.

Run: ``python benchmarks/rllib_overhead.py [--pairs 60] [--steps 1000]``.

Each variant is a real ``SingleAgentEnvRunner`` built from the same
``PPOConfig`` the Algorithm would send to its one remote EnvRunner, differing
only in ``config.callbacks(...)``. Each runner is a Ray actor, in a process of
its own, as RLlib runs it: what one variant does to its process (tracemalloc
is process-wide) cannot touch another's. Runs are interleaved (A B, B A, A B,
...), one at a time, and each timed run is ``runner.sample(num_timesteps=steps)``
followed by ``runner.get_metrics()`` (the reduce RLlib does once per
iteration, where the logged keys cost), timed inside the actor. The figure is
the median over pairs of ``steps/s(variant) / steps/s(baseline)``; single runs
vary by ±15% here.

To add a variant, add an entry to ``variants()``: a name and a function that
applies the callbacks to a config (e.g. a tracemalloc-always-on or windowed
``MemoryProbeCallback.configure(...)``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

Configure = Callable[[Any], Any]


def base_config() -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig

    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        # One seed for every runner: the same episodes, so that only the callback differs
        # (unseeded, two identical runners differed by 3% in the median of 30 pairs).
        .debugging(log_level="ERROR", seed=0)
    )


def make_runner(configure: Configure) -> Any:
    """A SingleAgentEnvRunner actor for ``configure(base_config())``, in its own process."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    import ray

    class TimedEnvRunner(SingleAgentEnvRunner):  # type: ignore[misc]
        def steps_per_second(self, steps: int) -> float:
            """Env steps sampled per second for one ``sample()`` + ``get_metrics()``."""
            t0 = time.perf_counter()
            episodes = self.sample(num_timesteps=steps)
            self.get_metrics()
            dt = time.perf_counter() - t0
            return sum(len(e) for e in episodes) / dt

        def memprobe_keys(self, steps: int) -> list[str]:
            self.sample(num_timesteps=steps)
            return [k for k in self.get_metrics() if k.startswith("memprobe/")]

    config = configure(base_config())
    actor = ray.remote(num_cpus=0)(TimedEnvRunner)
    return actor.remote(config=config, worker_index=1, num_workers=1)


def steps_per_second(runner: Any, steps: int) -> float:
    """Env steps sampled per second for one ``sample()`` + ``get_metrics()`` in the actor."""
    import ray

    return float(ray.get(runner.steps_per_second.remote(steps)))


def _frames_diagnose(nframe: int) -> dict[str, Any]:
    """diagnose's probes, tracing ``nframe`` frames in its windows."""
    from memprobe_rllib._options import DIAGNOSE_PROBES

    probes = {k: dict(v) for k, v in DIAGNOSE_PROBES.items()}
    probes["tracemalloc"].update(nframe=nframe, group_by="lineno" if nframe == 1 else "user")
    return probes


def _diagnose_budget() -> float:
    from memprobe_rllib._options import DIAGNOSE_BUDGET

    return DIAGNOSE_BUDGET


def variants() -> dict[str, Configure]:
    from memprobe_rllib import MemoryProbeCallback

    return {
        "none": lambda c: c,
        # A second runner without a callback: its ratio is the harness's own error (A/A).
        "none_again": lambda c: c,
        "default": lambda c: c.callbacks(MemoryProbeCallback),
        # All four probes, tracemalloc and objects in windows: the mode to leave on.
        "diagnose": lambda c: c.callbacks(MemoryProbeCallback.configure(diagnose=True)),
        # diagnose's probes with one frame traced per window (the allocating line alone):
        # what the user's line above a library's costs in the windows (16 frames).
        "diagnose_1frame": lambda c: c.callbacks(MemoryProbeCallback.configure(
            probes=_frames_diagnose(1), budget=_diagnose_budget())),
        "diagnose_2frames": lambda c: c.callbacks(MemoryProbeCallback.configure(
            probes=_frames_diagnose(2), budget=_diagnose_budget())),
        # All four probes at every episode end, tracing always on: the cost diagnose avoids.
        "all_four": lambda c: c.callbacks(MemoryProbeCallback.configure(
            probes=["process", "gc", "tracemalloc", "objects"])),
    }


def measure(names: list[str], pairs: int, steps: int, warmup: int = 3) -> dict[str, float]:
    """Median ratio (steps/s vs ``none``) for each variant in ``names``."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    table = variants()
    runners = {"none": make_runner(table["none"])}
    for n in names:
        runners[n] = make_runner(table[n])
    try:
        for r in runners.values():
            for _ in range(warmup):
                steps_per_second(r, steps)
        for n in names:  # the callback really runs (its keys reach the metrics)
            keys = ray.get(runners[n].memprobe_keys.remote(steps))
            print(f"{n}: {len(keys)} memprobe keys logged per sample()")
        ratios: dict[str, list[float]] = {n: [] for n in names}
        for i in range(pairs):
            for n in names:
                order = ["none", n] if i % 2 == 0 else [n, "none"]
                got = {k: steps_per_second(runners[k], steps) for k in order}
                ratios[n].append(got[n] / got["none"])
    finally:
        for r in runners.values():
            ray.kill(r)
        if started:
            ray.shutdown()
    return {n: statistics.median(v) for n, v in ratios.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--variants", nargs="*", default=["none_again", "default"])
    args = parser.parse_args()
    t0 = time.perf_counter()
    result = measure(args.variants, args.pairs, args.steps)
    print_table(result, args.pairs, args.steps, time.perf_counter() - t0)


def print_table(
    result: dict[str, float], pairs: int, steps: int, seconds: float, extra: str = ""
) -> None:
    """Print the median steps/s ratio of each variant against no callback."""
    print(f"PPO CartPole-v1 EnvRunner, {pairs} interleaved pairs of {steps} steps "
          f"({seconds:.0f} s){extra}")
    print(f"{'variant':<12}{'median steps/s ratio vs none':>30}")
    for n, ratio in result.items():
        print(f"{n:<12}{ratio:>30.3f}")


if __name__ == "__main__":
    main()
