"""memprobe's own memory in a healthy RLlib EnvRunner over a long run: it must stay flat.

A local ``SingleAgentEnvRunner`` (CartPole, the healthy env of
``benchmarks/rllib_field_envs.py``) with memprobe's callback in the given mode samples
500 steps then reports its metrics, per iteration. At a few iterations, after
``gc.collect()``, memprobe's own objects (``memprobe._own.own_objects()``: its Probers,
histories, tiers, caches) are counted and their ``sys.getsizeof`` summed; the types
whose bytes grew most between the first count and the last are printed.

    python benchmarks/own_memory_rllib.py --mode diagnose --iterations 150
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def census() -> dict[str, tuple[int, int]]:
    """``{type name: (objects, bytes)}`` of memprobe's own objects."""
    from memprobe._own import own_objects

    gc.collect()
    by: dict[str, tuple[int, int]] = {}
    for o in own_objects():
        name = type(o).__qualname__
        n, b = by.get(name, (0, 0))
        by[name] = (n + 1, b + sys.getsizeof(o))
    return by


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["default", "diagnose"], default="diagnose")
    parser.add_argument("--iterations", type=int, default=150)
    args = parser.parse_args(argv)

    import field_accuracy_rllib as field
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    env, _ = field.CASES["healthy"]
    logdir = tempfile.mkdtemp(prefix=f"own-memory-{args.mode}-")
    cfg = field.config(env, 0, field.callback(args.mode, logdir)).env_runners(
        num_env_runners=0)
    runner = SingleAgentEnvRunner(config=cfg)
    pool = ThreadPoolExecutor(1)  # as Ray's worker calls them: no line of this file on the stack
    at = sorted({20, args.iterations // 2, args.iterations})
    counts: dict[int, dict[str, tuple[int, int]]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(1, args.iterations + 1):
            pool.submit(runner.sample, num_timesteps=500).result()
            pool.submit(runner.get_metrics).result()
            if i in at:
                counts[i] = census()
                objects = sum(n for n, _ in counts[i].values())
                size = sum(b for _, b in counts[i].values())
                print(f"iteration {i}: {objects} objects, {size / 1e6:.2f} MB", flush=True)
    pool.submit(runner.stop).result()
    first, last = counts[at[0]], counts[at[-1]]
    grew = sorted(((last.get(t, (0, 0))[1] - first.get(t, (0, 0))[1], t)
                   for t in set(first) | set(last)), reverse=True)
    print("grew most (bytes, type):", [(b, t) for b, t in grew[:8] if b > 0])


if __name__ == "__main__":
    main()
