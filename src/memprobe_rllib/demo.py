"""The main job: PPO on CartPole-v1 with MemoryProbeCallback, ending with an answer.

Run ``python -m memprobe_rllib.demo [--iterations N] [--logdir DIR] [--leak]``:
new API stack, one remote EnvRunner, ``MemoryProbeCallback.configure(diagnose=True)``.
Prints one line per iteration, then, per process (the driver, each EnvRunner),
its memory at the start and the end, the growth, the verdict in plain words and
the culprit; draws memory over the iterations into a PNG; and prints the
command that opens the full report. ``--leak`` runs a CartPole whose every step
keeps 4 KiB, to show what a leak looks like.
"""

from __future__ import annotations

import argparse
import glob
import inspect
import logging
import math
import os
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import Any

import memprobe
from memprobe import keys as mkeys

from ._options import CallbackOptions

MIB = 2**20
PLAIN = {
    "leak": "LEAKING",
    "slight": "growing slightly (not a leak)",
    "levelled": "grew, then levelled off (warm-up, not a leak)",
    "ok": "flat",
    "insufficient": "not enough samples for a verdict",
}
#: What a process's EnvRunner columns say when RLlib reduced its memprobe keys to NaN:
#: no EnvRunner reported them before ``sample()`` timed out.
TIMED_OUT = "no sample this iteration (timed out)"
#: The command the README gives for the demo; ``-- --iterations N`` is appended.
DEMO_COMMAND = "python3 -m nox -s demo --"


class LeakyCartPole:
    """Built lazily (gymnasium is imported with Ray): CartPole keeping 4 KiB per step."""

    def __new__(cls, config: Any = None) -> Any:
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv

        class _Leaky(CartPoleEnv):  # type: ignore[misc]
            kept: list[bytearray] = []

            def step(self, action: Any) -> Any:
                self.kept.append(bytearray(4096))  # the leak the demo finds
                return super().step(action)

        return _Leaky()


def read_runs(logdir: str) -> dict[str, list[memprobe.Sample]]:
    """``{file name: samples}`` for every JSONL file the callback wrote (a bad line,
    such as the last line of a killed process, is skipped with a warning)."""
    runs: dict[str, list[memprobe.Sample]] = {}
    for path in sorted(glob.glob(os.path.join(logdir, "memprobe-*.jsonl"))):
        samples = memprobe.read_samples(path)
        if samples:
            runs[os.path.basename(path)] = samples
    return runs


def culprit_of(result: dict[str, Any]) -> str | None:
    """The first culprit an EnvRunner's leak keys name (``memprobe/leak/culprit/<where>/...``)."""
    for k in result:
        try:
            parts = mkeys.split_key(k, mkeys.DEFAULT_PREFIX)
        except ValueError:  # RLlib's own keys
            continue
        where = mkeys.site_name(parts.metric, sections=("culprit",))
        if parts.probe == "leak" and where is not None:
            return where
    return None


def _who(name: str) -> str:
    role, index = name.split("-")[1:3]
    return "driver" if role == "driver" else f"{role.replace('_', ' ')} {index}"


def _rss_key(samples: Sequence[memprobe.Sample]) -> str | None:
    prefix = mkeys.infer_prefix(samples[0].values)
    key = None if prefix is None else mkeys.make_key(prefix, "process", "rss_bytes")
    return key if key in samples[0].values else None


def samples_for_a_verdict(options: dict[str, Any] | None = None) -> int:
    """Samples a process needs for a verdict under the live alarm's ``options``
    (default ``CallbackOptions.alarm_options``): ``min_points``, twice that with
    ``warmup="auto"`` (fewer cannot tell a growth from a warm-up)."""
    opts = CallbackOptions().alarm_options if options is None else options
    defaults = inspect.signature(memprobe.analyze).parameters
    min_points = opts.get("min_points", defaults["min_points"].default)
    warmup = opts.get("warmup", defaults["warmup"].default)
    return 2 * min_points if warmup == "auto" else min_points


def _counted(samples: Sequence[memprobe.Sample]) -> int:
    key = _rss_key(samples)
    return 0 if key is None else sum(key in s.values for s in samples)


def iterations_for_a_verdict(runs: dict[str, list[memprobe.Sample]], iterations: int,
                             needed: int | None = None) -> int | None:
    """The ``--iterations`` that give every process in ``runs`` (written in
    ``iterations`` train() iterations) a verdict, or ``None`` when each has enough
    samples already. The driver samples once per iteration; an EnvRunner at each
    episode end, counted at the rate it had."""
    needed = samples_for_a_verdict() if needed is None else needed
    most = None
    for name, samples in runs.items():
        have = _counted(samples)
        if have >= needed:
            continue
        per_iteration = 1.0 if _who(name) == "driver" else max(have, 1) / max(iterations, 1)
        more = iterations + math.ceil((needed - have) / per_iteration)
        most = more if most is None else max(most, more)
    return most


def _finite(value: Any) -> float | None:
    """``value`` as a float, or ``None`` when missing or not finite (RLlib reduces a
    key that no EnvRunner reported in time to NaN, and NaN is truthy)."""
    if value is None or isinstance(value, (str, bytes, bool)):
        return None
    try:
        number = float(value)  # numpy's scalars too
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def iteration_line(it: int, seconds: float, result: dict[str, Any]) -> str:
    """The demo's line for train() iteration ``it`` from its ``result``: return, driver
    rss, EnvRunner rss, leak alarm. A missing or NaN value prints as ``-``; an EnvRunner
    whose values are NaN says it had no sample this iteration."""
    er = result.get("env_runners") or {}
    ret = _finite(er.get("episode_return_mean"))
    driver = _finite(result.get("memprobe/driver/process/rss_bytes"))
    runner = _finite(er.get("memprobe/process/rss_bytes"))
    alarm = "none"
    if runner is None:
        alarm = TIMED_OUT
    elif _finite(er.get("memprobe/leak/suspect")):
        rate = _finite(er.get("memprobe/leak/rate_per_hour"))
        where = culprit_of(er)
        alarm = ("EnvRunner 1 " + (f"{rate / MIB:+.0f} MiB/hour" if rate is not None
                                   else "suspects a leak")
                 + (f" at {where}" if where else ""))
    return (f"{it:>2} {seconds:>5.1f}s " + (f"{ret:>7.1f}" if ret is not None else f"{'-':>7}")
            + (f" | {driver / MIB:>6.0f} MiB" if driver is not None else f" | {'-':>10}")
            + (f" | {runner / MIB:>9.0f} MiB" if runner is not None else f" | {'-':>13}")
            + f" | {alarm}")


def run_longer(runs: dict[str, list[memprobe.Sample]], iterations: int,
               leak: bool = False) -> list[str]:
    """The demo's last lines when a process has too few samples for a verdict: the
    exact command that gives one. Empty when every process has enough."""
    more = iterations_for_a_verdict(runs, iterations)
    if more is None:
        return []
    return [f"a verdict needs {samples_for_a_verdict()} samples per process; "
            "for one on every process, run longer:",
            f"  {DEMO_COMMAND} --iterations {more}" + (" --leak" if leak else "")]


def summary(runs: dict[str, list[memprobe.Sample]]) -> list[str]:
    """One line per process: rss at the start and the end, growth, verdict, culprit.

    The verdict is the live alarm's: the same options (``CallbackOptions.alarm_options``).
    """
    lines = [f"{'process':<14}{'start':>10}{'end':>10}{'growth':>10}  verdict"]
    needed = samples_for_a_verdict()
    for name, samples in runs.items():
        key = _rss_key(samples)
        if key is None:
            continue
        have = [s.values[key] for s in samples if key in s.values]
        start, end = have[0] / MIB, have[-1] / MIB
        report = memprobe.analyze_samples(samples, **CallbackOptions().alarm_options)
        verdict = report.verdicts.get(key)
        status = verdict.status if verdict is not None else "insufficient"
        words = PLAIN.get(status, status)
        if status == "insufficient":
            words += f" ({len(have)} of {needed} samples)"
        if verdict is not None and verdict.leak and verdict.rate_per_hour is not None:
            words += f" at {verdict.rate_per_hour / MIB:+.0f} MiB/hour"
        leaks = report.leaks
        culprits = [c for v in leaks for c in v.culprits][:3]
        if leaks and not culprits:
            culprits = [v.note or "native" for v in leaks][:1]
        lines.append(f"{_who(name):<14}{start:>7.1f} MiB{end:>7.1f} MiB"
                     f"{end - start:>+7.1f} MiB  {words}"
                     + (f"; culprit: {', '.join(culprits)}" if culprits else ""))
    return lines


def plot(runs: dict[str, list[memprobe.Sample]], path: str) -> str:
    """Draw rss over the train() iterations, one line per process; returns what happened,
    in words."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
        import numpy as np
    except ImportError:
        return 'no plot: matplotlib is not installed (pip install "pymemprobe[plot]")'
    # The driver samples once per train() iteration (step = the iteration): its sample
    # times place every other process's samples on the iteration axis.
    driver = next((s for n, s in runs.items() if _who(n) == "driver"), [])
    anchors = [(s.time_seconds, s.step) for s in driver if isinstance(s.step, int)]
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, samples in runs.items():
        key = _rss_key(samples)
        if key is not None:
            have = [s for s in samples if key in s.values]  # not every sample has every probe
            times = [s.time_seconds for s in have]
            x = (np.interp(times, *zip(*anchors)) if len(anchors) >= 2
                 else [t - times[0] for t in times])
            ax.plot(x, [s.values[key] / MIB for s in have], label=_who(name))
    if len(anchors) >= 2:
        ax.set_xlabel("train() iteration")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    else:
        ax.set_xlabel("seconds since the first sample")
    ax.set_ylabel("rss (MiB)")
    ax.set_title("PPO CartPole-v1: memory of each process")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"memory over the iterations: {path}"


def _quiet_ray() -> None:
    # Ray's C++ core logs at level E lines that are not errors of this job (e.g. "actor
    # constructor arguments in the object store and max_restarts > 0"); RLlib logs
    # deprecation notices. Neither concerns memory: keep only fatal lines.
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    for name in ("ray", "ray.rllib", "ray.tune"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memprobe_rllib.demo", description=__doc__)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--logdir", default=None, help="JSONL directory (default: a temp dir)")
    parser.add_argument("--leak", action="store_true", help="a CartPole that leaks 4 KiB a step")
    args = parser.parse_args(argv)
    logdir = os.path.abspath(args.logdir or tempfile.mkdtemp(prefix="memprobe-demo-"))
    os.makedirs(logdir, exist_ok=True)
    _quiet_ray()

    from ray.rllib.algorithms.ppo import PPOConfig

    import ray
    from memprobe_rllib import MemoryProbeCallback

    own_ray = not ray.is_initialized()  # main() called where Ray already runs uses that Ray
    if own_ray:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
    _quiet_ray()  # again: ray.init configures Ray's loggers
    config = (
        PPOConfig()
        .environment(LeakyCartPole if args.leak else "CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(train_batch_size=1000, minibatch_size=128, num_epochs=2)
        .callbacks(MemoryProbeCallback.configure(diagnose=True, jsonl=logdir))
        .debugging(log_level="ERROR")
    )
    t0 = time.perf_counter()
    algo = config.build_algo()
    print(f"built PPO on CartPole-v1 (new API stack, 1 remote EnvRunner) in "
          f"{time.perf_counter() - t0:.0f} s; MemoryProbeCallback.configure(diagnose=True)")
    print("it   time  return | driver rss | EnvRunner rss | leak alarm")
    try:
        for it in range(1, args.iterations + 1):
            t1 = time.perf_counter()
            r = algo.train()
            print(iteration_line(it, time.perf_counter() - t1, r))
    finally:
        algo.stop()
        if own_ray:
            ray.shutdown()
    runs = read_runs(logdir)
    print("\nper process (rss; a sample is one train() iteration for the driver, one "
          "episode end for an EnvRunner):")
    for line in summary(runs):
        print("  " + line)
    print(plot(runs, os.path.join(logdir, "memory.png")))
    print(f"JSONL logs (one per process): {logdir}")
    where = shlex.quote(logdir)
    print("the full report:\n  "
          f"{shlex.quote(sys.executable)} -m memprobe report {where}/*.jsonl "
          f"--html {where}/report.html")
    for line in run_longer(runs, args.iterations, leak=args.leak):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
