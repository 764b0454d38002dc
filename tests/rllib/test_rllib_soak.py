"""A long RLlib run (30 PPO iterations on CartPole-v1) and faults in the driver process.

The probes run in the driver (``num_env_runners=0``: the local EnvRunner
samples), where tracemalloc, started after the Algorithm is built but before
its first iteration builds the Probers, can attribute live memory to
memprobe's files. (A raising probe in a remote EnvRunner, and an EnvRunner
killed and restarted, are in test_rllib_callback.py.)
"""

from __future__ import annotations

import gc
import math
import os
import tracemalloc
import warnings

import pytest

pytest.importorskip("ray.rllib")

import memprobe
import memprobe_rllib
from memprobe_rllib import MemoryProbeCallback

pytestmark = pytest.mark.rllib
RSS = "memprobe/process/rss_bytes"
OWN_FILES = [
    tracemalloc.Filter(True, os.path.join(os.path.dirname(os.path.abspath(m.__file__)), "*"))
    for m in (memprobe, memprobe_rllib)
]
#: The ring buffers fill before iteration 10, and the leak checks allocate their tiers
#: (fixed-size storage of every time scale) at their first check, at iteration 20 in the
#: driver (one sample per iteration); from then on memprobe's own memory is flat.
ITERATIONS = 30
HISTORY = 8  # both ring buffers full before iteration 10


def driver_ppo(callbacks: type, train_batch_size: int, minibatch_size: int):
    """PPO on CartPole-v1 sampling in the driver (no remote EnvRunners), one epoch."""
    from ray.rllib.algorithms.ppo import PPOConfig

    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(train_batch_size=train_batch_size, minibatch_size=minibatch_size, num_epochs=1)
        .callbacks(callbacks)
        .debugging(log_level="ERROR")
    )


def memprobe_traced_bytes() -> int:
    """Live traced bytes allocated in memprobe's or memprobe_rllib's files."""
    gc.collect()
    snap = tracemalloc.take_snapshot().filter_traces(OWN_FILES)
    return sum(stat.size for stat in snap.statistics("filename"))


@pytest.mark.slow
def test_thirty_ppo_iterations_show_no_memprobe_growth(ray_session) -> None:
    config = driver_ppo(MemoryProbeCallback.configure(history=HISTORY), 128, 64)
    owned: dict[int, int] = {}
    algo = config.build_algo()
    tracemalloc.start(1)
    try:
        seen = []  # copies: a result dict kept here would keep memprobe's values alive
        for i in range(1, ITERATIONS + 1):
            r = algo.train()
            seen.append((
                float(r["env_runners"].get(RSS, 0)),
                float(r.get("memprobe/driver/process/rss_bytes", 0)),
                sorted(str(k) for k in r["env_runners"] if str(k).startswith("memprobe/errors/")),
            ))
            del r
            if i in (10, 20, ITERATIONS):
                owned[i] = memprobe_traced_bytes()
        (callback,) = algo.env_runner._callbacks
        prober = callback.prober
        driver_prober = callback_of(algo).driver_prober
    finally:
        tracemalloc.stop()
        algo.stop()
    assert prober is not None and driver_prober is not None
    # Every iteration carries the memprobe keys, from the EnvRunner and the driver.
    for rss, driver_rss, errors in seen:
        assert rss > 10 * 2**20 and driver_rss > 10 * 2**20 and not errors
    # The ring buffers are full and bounded.
    assert len(prober.history) == HISTORY and prober._calls > 3 * HISTORY
    assert len(driver_prober.history) == HISTORY  # one sample per iteration
    # memprobe's own live memory in the driver does not grow once its checks have run.
    assert owned[ITERATIONS] - owned[20] < 64 * 1024, owned


def callback_of(algo):
    callbacks = algo.callbacks
    return callbacks[0] if isinstance(callbacks, list) else callbacks


@pytest.mark.parametrize("warnings_filter", ["ignore", "error"])
def test_raising_probe_and_short_batches_in_the_driver(ray_session, warnings_filter) -> None:
    """A probe that always raises, in the driver's EnvRunner and in the driver's own
    Prober; batches of 8 steps, so most ``sample()`` calls end no episode (CartPole's
    random-policy episodes last about 20 steps: 8 iterations that all end one are rare).

    ``train()`` never raises and the failures are counted. With its warning
    ignored (or printed, as outside pytest), every iteration has the memory keys;
    with warnings as errors (pytest), the samples in which the probe's warning is
    raised (its first failure, its disabling) are lost and counted in
    ``errors/memprobe_rllib``.
    """
    cls = MemoryProbeCallback.configure(
        probes=["process", "raising"], plugins=["memprobe_test_raising_plugin"]
    )
    config = driver_ppo(cls, 8, 8)
    algo = config.build_algo()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(warnings_filter, category=memprobe.ProbeFailedWarning)
            results = [algo.train() for _ in range(8)]
    finally:
        algo.stop()
    assert any(r["env_runners"].get("num_episodes", 0) == 0 for r in results)
    checked = results if warnings_filter == "ignore" else results[-2:]
    for r in checked:
        assert math.isfinite(r["env_runners"][RSS]) and r["env_runners"][RSS] > 10 * 2**20
        assert r["memprobe/driver/process/rss_bytes"] > 10 * 2**20
    last = results[-1]
    assert last["env_runners"]["memprobe/errors/raising"] >= 1
    assert last["memprobe/driver/errors/raising"] >= 1
    if warnings_filter == "error":
        assert last["env_runners"]["memprobe/errors/memprobe_rllib"] >= 1
    else:
        assert "memprobe/errors/memprobe_rllib" not in last["env_runners"]
