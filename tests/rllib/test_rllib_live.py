"""The live verdict in real PPO runs: no NaN, a stable key set, no alarm on a healthy
job, and an injected leak found with its EnvRunner and its culprit named.

Two short runs (PPO CartPole-v1, one remote EnvRunner, ``diagnose=True``: all four
probes, tracemalloc in windows), shared by the tests of this module.
"""

from __future__ import annotations

import json
import math
import warnings

import pytest

pytest.importorskip("ray.rllib")

from memprobe_rllib import MemoryProbeCallback

pytestmark = pytest.mark.rllib
ITERATIONS = 10


def ppo(env, callbacks, **learners):
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=1)
        .training(train_batch_size=500, minibatch_size=128, num_epochs=1)
        .callbacks(callbacks)
        .debugging(log_level="ERROR", seed=0)
    )
    return config.learners(**learners) if learners else config


def run(config, iterations):
    algo = config.build_algo()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [algo.train() for _ in range(iterations)]
    finally:
        algo.stop()


def run_until(config, iterations, done):
    """Train up to ``iterations`` times, stopping after the first result ``done(result)``
    accepts; the results. An alarm's iteration varies from run to run (the allocator's
    steps, the episodes per iteration: docs/rllib.md), so a test waits for it within a
    bound instead of reading a fixed iteration."""
    algo = config.build_algo()
    results = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(iterations):
                results.append(algo.train())
                if done(results[-1]):
                    break
        return results
    finally:
        algo.stop()


def alarmed(result, *culprit_parts):
    """Whether the EnvRunners' result has alarmed, and has a culprit key holding every
    one of ``culprit_parts``."""
    er = result["env_runners"]
    if er.get("memprobe/leak/suspect") != 1.0:
        return False
    return not culprit_parts or any(
        all(p in k for p in culprit_parts) for k in er if k.startswith("memprobe/leak/culprit/"))


def memprobe_keys(result):
    """Every memprobe key of one result: EnvRunner keys, then driver and learner keys."""
    er = {f"env_runners/{k}": v for k, v in result["env_runners"].items()
          if str(k).startswith("memprobe/")}
    top = {k: v for k, v in result.items() if str(k).startswith("memprobe/")}
    return {**er, **top}


@pytest.fixture(scope="module")
def healthy(ray_session, tmp_path_factory):
    logdir = tmp_path_factory.mktemp("healthy")
    cls = MemoryProbeCallback.configure(diagnose=True, jsonl=str(logdir))
    return run(ppo("CartPole-v1", cls, num_learners=1), ITERATIONS), logdir


def test_no_nan_and_the_same_keys_every_iteration(healthy):
    results, _ = healthy
    first = memprobe_keys(results[0])
    assert "env_runners/memprobe/tracemalloc/survivors_bytes" in first
    assert "env_runners/memprobe/objects/total_count" in first
    assert "env_runners/memprobe/leak/process/rss_bytes/rate_per_hour" in first
    assert "memprobe/learner_0/process/rss_bytes" in first
    assert "memprobe/driver/leak/suspect" in first
    # After the first iteration the key set is stable (the driver's windowed probes may
    # first report in the second); no NaN in any iteration.
    stable = set(memprobe_keys(results[1]))
    assert set(first) <= stable, set(first) - stable
    for i, r in enumerate(results):
        values = memprobe_keys(r)
        nan = [k for k, v in values.items() if isinstance(v, float) and math.isnan(v)]
        assert not nan, (i, nan)
        if i >= 1:
            assert set(values) == stable, (i, set(values) ^ stable)


def test_a_healthy_run_raises_no_alarm(healthy):
    results, _ = healthy
    for r in results:
        assert r["env_runners"]["memprobe/leak/suspect"] == 0.0
        assert r["memprobe/driver/leak/suspect"] == 0.0
        assert r["memprobe/learner_0/leak/suspect"] == 0.0


def test_every_process_writes_its_own_role(healthy):
    _, logdir = healthy
    tags = set()
    for f in logdir.glob("memprobe-*.jsonl"):
        first = json.loads(f.open().readline())
        tags.add((first["role"], first.get("env_runner"), first.get("learner")))
        prefix = {"driver": "memprobe/driver/", "learner": "memprobe/learner/",
                  "env_runner": "memprobe/process/"}[first["role"]]
        assert any(k.startswith(prefix) for k in first["values"]), (f, first)
    assert tags == {("driver", None, None), ("env_runner", 1, None), ("learner", None, 0)}


def test_memprobe_report_on_a_healthy_run_agrees_with_the_alarm(healthy):
    import subprocess
    import sys

    _, logdir = healthy
    files = sorted(str(f) for f in logdir.glob("memprobe-*.jsonl"))
    res = subprocess.run([sys.executable, "-m", "memprobe", "report", *files],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"{len(files)} process(es), 0 leaking metric(s)" in res.stdout, res.stdout
    assert "LEAK" not in res.stdout, res.stdout


def test_an_injected_leak_is_found_and_named(ray_session):
    from memprobe_test_leaky_env import LEAKED, LeakyCartPole, leak_line

    cls = MemoryProbeCallback.configure(diagnose=True, learners=False)
    line = leak_line()
    # The alarm asks a leak to persist over 1.5 times the scale it was first judged on
    # (at most 128 samples): iteration 8-12 in runs here, so up to 20.
    results = run_until(ppo(LeakyCartPole, cls), 20, lambda r: alarmed(r, line))
    LEAKED.clear()
    er = results[-1]["env_runners"]
    assert alarmed(results[-1], line), [r["env_runners"]["memprobe/leak/suspect"]
                                        for r in results]
    assert er["memprobe/leak/env_runner_1"] == 1.0  # which EnvRunner
    assert er["memprobe/leak/rate_per_hour"] > 2**20  # 4 KiB per env step: MiB per hour
    assert results[-1]["memprobe/driver/leak/suspect"] == 0.0  # the driver does not leak


def test_retained_small_objects_are_found_and_their_type_named(ray_session):
    """Three ~100 B objects kept per env step: far under the resident-size floor, found
    through gc/allocated_blocks, and named: by the user's line that makes them when the
    windows saw it keep them (they list the user's sites first), else by their type,
    which the capture after the alarm counts."""
    from memprobe_test_leaky_env import NOTES, RetainingCartPole, notes_line

    cls = MemoryProbeCallback.configure(diagnose=True, learners=False)
    line = notes_line()

    def named(result):
        return alarmed(result, line) or alarmed(result, "StepNote")

    results = run_until(ppo(RetainingCartPole, cls), 20, named)
    NOTES.clear()
    er = results[-1]["env_runners"]
    culprits = [k for k in er if k.startswith("memprobe/leak/culprit/")]
    assert named(results[-1]), ([r["env_runners"]["memprobe/leak/suspect"] for r in results],
                                culprits)
    assert er["memprobe/leak/gc/allocated_blocks/suspect"] == 1.0
    assert results[-1]["memprobe/driver/leak/suspect"] == 0.0
