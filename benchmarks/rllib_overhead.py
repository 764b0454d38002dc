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
vary by ±15% here. Beside it, the same ratio in steps per CPU second of the
actor's process (``time.process_time()``): what the callback adds in work,
which waiting for a core shared with other jobs does not inflate.

To add a variant, add an entry to ``variants()``: a name and a function that
applies the callbacks to a config (e.g. a tracemalloc-always-on or windowed
``MemoryProbeCallback.configure(...)``).

``--local`` runs the same pairs without a Ray cluster: each variant's runner is a
local ``SingleAgentEnvRunner`` in a process of its own (``multiprocessing``,
spawned), driven through a pipe, timed in that process as above.

``--train`` measures the whole ``Algorithm.train()`` iteration instead (PPO,
1 remote EnvRunner, the Learner local to the algorithm, ``train_batch_size``
1000): each variant's Algorithm is built inside a Ray actor of its own (the
driver's and Learner's probes in that process, not shared), with JSONL written
to a temporary directory (``train_variants()``); iterations are interleaved
(A B, B A, ...), each timed inside its actor, and the figure is the median over
pairs of ``seconds(none) / seconds(variant)`` (iterations per second, as a ratio).
"""

from __future__ import annotations

import argparse
import os
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
        def steps_per_second(self, steps: int) -> tuple[float, float]:
            """Env steps sampled per second, and per CPU second of this process, for one
            ``sample()`` + ``get_metrics()``."""
            t0, c0 = time.perf_counter(), time.process_time()
            episodes = self.sample(num_timesteps=steps)
            self.get_metrics()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            n = sum(len(e) for e in episodes)
            return n / dt, n / dc

        def memprobe_keys(self, steps: int) -> list[str]:
            self.sample(num_timesteps=steps)
            return [k for k in self.get_metrics() if k.startswith("memprobe/")]

    config = configure(base_config())
    actor = ray.remote(num_cpus=0)(TimedEnvRunner)
    return actor.remote(config=config, worker_index=1, num_workers=1)


def steps_per_second(runner: Any, steps: int) -> tuple[float, float]:
    """Env steps sampled per second, and per CPU second of the actor's process, for one
    ``sample()`` + ``get_metrics()`` in the actor."""
    import ray

    wall, cpu = ray.get(runner.steps_per_second.remote(steps))
    return float(wall), float(cpu)


class LocalRunner:
    """A variant's ``SingleAgentEnvRunner`` in a spawned process of its own, no Ray
    cluster; ``steps_per_second`` as :func:`steps_per_second`."""

    def __init__(self, name: str) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_local_runner, args=(name, child), daemon=True)
        self.process.start()

    def steps_per_second(self, steps: int) -> tuple[float, float]:
        self.conn.send(steps)
        wall, cpu = self.conn.recv()
        return float(wall), float(cpu)

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(timeout=60)


def _local_runner(name: str, conn: Any) -> None:
    """The loop of a :class:`LocalRunner`'s process."""
    import warnings

    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    warnings.simplefilter("ignore")
    runner = SingleAgentEnvRunner(config=variants()[name](base_config()), worker_index=1,
                                  num_workers=1)
    while (steps := conn.recv()) is not None:
        t0, c0 = time.perf_counter(), time.process_time()
        episodes = runner.sample(num_timesteps=steps)
        runner.get_metrics()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        n = sum(len(e) for e in episodes)
        conn.send((n / dt, n / dc))


def measure_local(
    names: list[str], pairs: int, steps: int, warmup: int = 3
) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`measure_wall_cpu` with :class:`LocalRunner` runners (no Ray cluster)."""
    runners = {n: LocalRunner(n) for n in ["none", *names]}
    try:
        for r in runners.values():
            for _ in range(warmup):
                r.steps_per_second(steps)
        ratios: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for i in range(pairs):
            for n in names:
                order = ["none", n] if i % 2 == 0 else [n, "none"]
                got = {k: runners[k].steps_per_second(steps) for k in order}
                ratios[n].append(got[n][0] / got["none"][0])
                cpu[n].append(got[n][1] / got["none"][1])
    finally:
        for r in runners.values():
            r.close()
    return ({n: statistics.median(v) for n, v in ratios.items()},
            {n: statistics.median(v) for n, v in cpu.items()})


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


def train_variants() -> dict[str, Configure]:
    """Whole-iteration variants: the callback with JSONL files, or none."""
    import tempfile

    from memprobe_rllib import MemoryProbeCallback

    def jsonl(**options: Any) -> Configure:
        def apply(c: Any) -> Any:
            logdir = tempfile.mkdtemp(prefix="memprobe-overhead-")
            return c.callbacks(MemoryProbeCallback.configure(jsonl=logdir, **options))
        return apply

    return {
        "none": lambda c: c,
        "none_again": lambda c: c,
        "default_jsonl": jsonl(),
        "diagnose_jsonl": jsonl(diagnose=True),
    }


def make_trainer(configure: Configure) -> Any:
    """An actor holding a PPO Algorithm for ``configure(config)``, timing ``train()``."""
    import ray

    class Trainer:
        def __init__(self) -> None:
            import warnings

            warnings.simplefilter("ignore")
            config = (configure(base_config())
                      .learners(num_learners=0)
                      .training(train_batch_size=1000, minibatch_size=128, num_epochs=1))
            self.algo = config.build_algo()

        def train_seconds(self) -> float:
            t0 = time.perf_counter()
            self.algo.train()
            return time.perf_counter() - t0

        def stop(self) -> None:
            self.algo.stop()

    return ray.remote(num_cpus=0)(Trainer).remote()


def measure_train(names: list[str], pairs: int, warmup: int = 3) -> dict[str, float]:
    """Median ratio seconds(none) / seconds(variant) of one ``train()`` iteration."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    table = train_variants()
    ratios: dict[str, list[float]] = {}
    try:
        for n in names:  # one variant at a time beside the baseline: 2 EnvRunners, 2 CPUs
            trainers = {"none": make_trainer(table["none"]), n: make_trainer(table[n])}
            try:
                for t in trainers.values():
                    for _ in range(warmup):
                        ray.get(t.train_seconds.remote())
                ratios[n] = []
                for i in range(pairs):
                    order = ["none", n] if i % 2 == 0 else [n, "none"]
                    got = {k: ray.get(trainers[k].train_seconds.remote()) for k in order}
                    ratios[n].append(got["none"] / got[n])
            finally:
                for t in trainers.values():
                    try:
                        ray.get(t.stop.remote(), timeout=60)
                    finally:
                        ray.kill(t)
    finally:
        if started:
            ray.shutdown()
    return {n: statistics.median(v) for n, v in ratios.items()}


def measure(names: list[str], pairs: int, steps: int, warmup: int = 3) -> dict[str, float]:
    """Median ratio (steps/s vs ``none``) for each variant in ``names``."""
    return measure_wall_cpu(names, pairs, steps, warmup)[0]


def measure_wall_cpu(
    names: list[str], pairs: int, steps: int, warmup: int = 3
) -> tuple[dict[str, float], dict[str, float]]:
    """Median ratios vs ``none`` for each variant in ``names``: of steps per second, and
    of steps per CPU second of the runner's process."""
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
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for i in range(pairs):
            for n in names:
                order = ["none", n] if i % 2 == 0 else [n, "none"]
                got = {k: steps_per_second(runners[k], steps) for k in order}
                ratios[n].append(got[n][0] / got["none"][0])
                cpu[n].append(got[n][1] / got["none"][1])
    finally:
        for r in runners.values():
            ray.kill(r)
        if started:
            ray.shutdown()
    return ({n: statistics.median(v) for n, v in ratios.items()},
            {n: statistics.median(v) for n, v in cpu.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--variants", nargs="*", default=None,
                        help="default: none_again default (with --train: none_again "
                             "diagnose_jsonl)")
    parser.add_argument("--local", action="store_true",
                        help="EnvRunners in processes of their own, no Ray cluster")
    parser.add_argument("--train", action="store_true",
                        help="time whole train() iterations (see the module's doc)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.train:
        names = args.variants or ["none_again", "diagnose_jsonl"]
        unknown = sorted(set(names) - set(train_variants()))
        if unknown:
            parser.error(f"--variants with --train: unknown {unknown}; "
                         f"choose from {sorted(train_variants())}")
        load = os.getloadavg()[0]
        result = measure_train(names, args.pairs)
        print(f"PPO CartPole-v1 train() iterations (train_batch_size=1000), {args.pairs} "
              f"interleaved pairs per variant ({time.perf_counter() - t0:.0f} s, load "
              f"average {load:.1f} -> {os.getloadavg()[0]:.1f})")
        print(f"{'variant':<16}{'median iterations/s ratio vs none':>36}")
        for n, ratio in result.items():
            print(f"{n:<16}{ratio:>36.3f}")
        return
    load = os.getloadavg()[0]
    measure_runners = measure_local if args.local else measure_wall_cpu
    result, cpu = measure_runners(args.variants or ["none_again", "default"], args.pairs,
                                  args.steps)
    print_table(result, args.pairs, args.steps, time.perf_counter() - t0,
                f", load average {load:.1f} -> {os.getloadavg()[0]:.1f}"
                + (", local runners (no Ray cluster)" if args.local else ""), cpu=cpu)


def print_table(
    result: dict[str, float], pairs: int, steps: int, seconds: float, extra: str = "",
    cpu: dict[str, float] | None = None,
) -> None:
    """Print the median steps/s ratio of each variant against no callback (and of steps
    per CPU second, when given)."""
    print(f"PPO CartPole-v1 EnvRunner, {pairs} interleaved pairs of {steps} steps "
          f"({seconds:.0f} s){extra}")
    print(f"{'variant':<12}{'median steps/s ratio vs none':>30}"
          + (f"{'per CPU second':>16}" if cpu else ""))
    for n, ratio in result.items():
        print(f"{n:<12}{ratio:>30.3f}" + (f"{cpu[n]:>16.3f}" if cpu else ""))


if __name__ == "__main__":
    main()
