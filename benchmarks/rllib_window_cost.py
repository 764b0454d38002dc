"""Where ``diagnose=True`` spends in an EnvRunner: traced episodes against untraced ones.

Run: ``python benchmarks/rllib_window_cost.py [--samples 15] [--nframe 4]``.

One local ``SingleAgentEnvRunner`` (PPO CartPole-v1, the same config as
``benchmarks/rllib_overhead.py``, no Ray cluster) with
``MemoryProbeCallback.configure(diagnose=True)``, or diagnose's probes with
``--nframe`` frames traced in the windows, runs ``sample(num_timesteps=1000)`` +
``get_metrics()`` ``--samples`` times after 3 to warm up. Each episode's CPU time
(``time.process_time()`` from the end of the callback's work at the previous
episode end to this one) is filed as traced (tracemalloc on at its end) or
untraced; the callback's own time at the episode ends is summed apart. Printed:
the median CPU time per step of each kind (their ratio is tracing's slowdown
of the user's code), the share of the run's CPU time spent in traced episodes
(what the windows cost), and in the callback (what the probes' samples cost).
CPU time, not wall time: other jobs on the machine do not inflate it.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
import warnings
from typing import Any

from rllib_overhead import base_config


def build(nframe: int | None) -> Any:
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from memprobe_rllib import MemoryProbeCallback
    from memprobe_rllib._options import DIAGNOSE_BUDGET, DIAGNOSE_PROBES

    if nframe is None:
        cls = MemoryProbeCallback.configure(diagnose=True)
    else:
        probes = {k: dict(v) for k, v in DIAGNOSE_PROBES.items()}
        probes["tracemalloc"].update(nframe=nframe, group_by="lineno" if nframe == 1 else "user")
        cls = MemoryProbeCallback.configure(probes=probes, budget=DIAGNOSE_BUDGET)
    return SingleAgentEnvRunner(config=base_config().callbacks(cls), worker_index=1,
                                num_workers=1), cls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--nframe", type=int, default=None,
                        help="frames traced in the windows (default: diagnose's own)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    runner, cls = build(args.nframe)
    for _ in range(3):
        runner.sample(num_timesteps=1000)
        runner.get_metrics()
    per_step: dict[bool, list[float]] = {True: [], False: []}
    spent = {True: 0.0, False: 0.0, "callback": 0.0}
    last = [time.process_time()]
    on_episode_end = cls.on_episode_end

    def timed(self: Any, *a: Any, episode: Any = None, **k: Any) -> None:
        t = time.process_time()
        traced = tracemalloc.is_tracing()
        spent[traced] += t - last[0]
        if episode is not None and len(episode):
            per_step[traced].append((t - last[0]) / len(episode))
        on_episode_end(self, *a, episode=episode, **k)
        last[0] = time.process_time()
        spent["callback"] += last[0] - t

    cls.on_episode_end = timed  # type: ignore[method-assign]
    t0 = time.process_time()
    for _ in range(args.samples):
        last[0] = time.process_time()
        runner.sample(num_timesteps=1000)
        runner.get_metrics()
    total = time.process_time() - t0
    runner.stop()
    on, off = per_step[True], per_step[False]
    print(f"{args.samples} x 1000 steps, {total:.1f} CPU s; episodes traced {len(on)}, "
          f"untraced {len(off)}")
    if on and off:
        a, b = statistics.median(on), statistics.median(off)
        print(f"CPU ms per step: traced {a * 1e3:.2f}, untraced {b * 1e3:.2f} "
              f"(tracing slows the episode {a / b:.1f}-fold)")
    print(f"share of CPU time: traced episodes {spent[True] / total:.1%}, "
          f"the callback at episode ends {spent['callback'] / total:.1%}")


if __name__ == "__main__":
    main()
