"""The RLlib adapter's own per-process state is memprobe's, not the user's: an objects
count, a capture and a referrer walk leave out the callback, its ProcessProber, the
result log's cells, the latest values and the leak state (memprobe.register_own), in a
real EnvRunner."""

from __future__ import annotations

import pickle
import warnings

import pytest

pytest.importorskip("ray.rllib")

import memprobe
from memprobe._own import own_ids, own_type_counts
from memprobe_rllib import MemoryProbeCallback
from memprobe_rllib._process import ProcessProber


def _runner(callback_cls):
    """A real SingleAgentEnvRunner in this process (no Ray cluster), the callback in it."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
              .callbacks(callback_cls).debugging(log_level="ERROR", seed=0))
    return SingleAgentEnvRunner(config=config)


def _callback_of(runner) -> MemoryProbeCallback:
    found = [c for c in getattr(runner, "_callbacks", ())
             if isinstance(c, MemoryProbeCallback)]
    if not found:  # older RLlib: one callbacks object
        found = [runner._callbacks] if isinstance(getattr(runner, "_callbacks", None),
                                                  MemoryProbeCallback) else []
    assert found, "the runner built no MemoryProbeCallback"
    return found[0]


@pytest.mark.parametrize("options", [{}, {"diagnose": True}], ids=["default", "diagnose"])
def test_an_env_runner_s_callback_state_is_memprobe_s_own(options):
    """Before: only the Prober (and, through its on_leak, the leak state) was memprobe's;
    the callback, its ProcessProber and its result log were counted as the user's
    objects (a ``memprobe_rllib._process.ProcessProber`` in a count by type)."""
    runner = _runner(MemoryProbeCallback.configure(**options))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                runner.sample(num_timesteps=200)
                runner.get_metrics()
        callback = _callback_of(runner)
        env = callback._env
        assert isinstance(env, ProcessProber) and env.log.cells, "the callback sampled nothing"
        state = {"callback": callback, "callback.__dict__": callback.__dict__,
                 "ProcessProber": env, "its __dict__": env.__dict__, "log": env.log,
                 "log cells": env.log.cells, "latest values": env.last, "leak": env.leak,
                 "leak culprits": env.leak.culprits, "Prober": env.prober}
        ids = own_ids()
        missing = [name for name, obj in state.items() if id(obj) not in ids]
        assert not missing, f"counted as the user's: {missing}"
        counts = own_type_counts()
        assert ProcessProber not in counts, counts[ProcessProber]
        assert type(callback) not in counts, counts[type(callback)]
    finally:
        runner.stop()
        for c in getattr(runner, "_callbacks", ()) or ():
            if isinstance(c, MemoryProbeCallback) and c.prober is not None:
                c.prober.stop()  # RLlib's stop() calls no callback hook


def test_a_callback_made_by_unpickling_is_memprobe_s_own():
    """Ray ships the callback by pickling; the copy is registered too."""
    callback = pickle.loads(pickle.dumps(MemoryProbeCallback()))
    assert id(callback) in own_ids()


def test_register_own_is_public_and_holds_weakly():
    import gc
    import weakref

    class _State:  # a plain object: counted as given, not walked into
        pass

    state = _State()
    memprobe.register_own(state)
    assert id(state) in own_ids()
    ref = weakref.ref(state)
    del state
    gc.collect()
    assert ref() is None
