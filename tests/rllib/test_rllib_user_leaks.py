"""Leaks a user makes outside the env: in a callback of their own beside memprobe's, in
the driver, in the Learner. What memprobe names must be the user's, never the adapter's."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.rllib")

from memprobe_rllib import MemoryProbeCallback

pytestmark = pytest.mark.rllib

#: The user's own list of every episode (as an ``on_episode_end`` of theirs would keep).
EPISODES: list = []


def test_holders_never_name_the_adapters_own_hook_frame():
    """The alarm's capture walks holders inside the callback's ``on_episode_end``, which
    has the episode RLlib handed it as a local: the chain must go on to what keeps the
    episode (the user's list), not stop at the adapter's frame (a real run's report read
    ``... SingleAgentEpisode <- local 'episode' of frame on_episode_end at
    memprobe_rllib/_callback.py:156``)."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from memprobe.referrers import referrer_chains

    chains = []

    class Runner:
        """An EnvRunner whose ``worker_index`` the hook reads: the walk runs from it."""

        config = None

        @property
        def worker_index(self) -> int:
            chains.extend(referrer_chains([EPISODES[-1]], timeout_seconds=10))
            return 1

    EPISODES.append(SingleAgentEpisode())
    try:
        cb = MemoryProbeCallback.configure(probes=["process"], leak_check_every=None,
                                           driver=False, learners=False)()
        cb.on_episode_end(episode=EPISODES[-1], env_runner=Runner(), metrics_logger=None)
    finally:
        EPISODES.clear()
    assert len(chains) == 1, chains
    text = str(chains[0])
    assert chains[0].complete, text
    assert "memprobe_rllib" not in text, text
    assert "EPISODES" in text, text


def _ppo(callbacks):
    from ray.rllib.algorithms.ppo import PPOConfig

    return (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
            .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
            .callbacks(callbacks).debugging(log_level="ERROR", seed=0))


@pytest.mark.parametrize("form", ["list", "subclass"])
def test_memprobes_callback_beside_the_users_own(ray_session, tmp_path, form):
    """docs/rllib.md's two ways to combine callbacks: both run in the EnvRunner (the
    user's episode count and memprobe's keys are in the results), nothing fails in the
    adapter, and each process writes its JSONL."""
    import memprobe_test_user_callbacks as user

    opts = {"jsonl": str(tmp_path), "learners": False}
    callbacks = ([MemoryProbeCallback.configure(**opts), user.UserCallbacks] if form == "list"
                 else user.UserProbeCallbacks.configure(**opts))
    algo = _ppo(callbacks).build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    er = results[-1]["env_runners"]
    assert er.get("user/episodes", 0) > 0, sorted(er)
    assert er["memprobe/process/rss_bytes"] > 0
    assert "memprobe/leak/suspect" in er
    assert "memprobe/driver/process/rss_bytes" in results[-1]
    errors = [k for r in results for k in (*r, *r["env_runners"]) if "errors/memprobe_rllib" in k]
    assert not errors, errors
    roles = sorted(p.name.split("-")[1] for p in tmp_path.glob("memprobe-*.jsonl"))
    assert roles == ["driver", "env_runner"], roles


def test_a_learners_tracing_windows_see_what_an_iteration_keeps(tmp_path):
    """``diagnose=True`` in a Learner, sampled as the driver samples it (the first call
    samples twice in one iteration): the window that closed at the step it opened traced
    no work and is no evidence. Counted, it halved what the windows saw kept at the
    user's line (a Learner's numpy copies, 485 KiB per iteration, read 242 KiB: under a
    quarter of its rss growth, so the leak was called native)."""
    import time

    import numpy as np

    from memprobe.leak._series import judged_keys, sample_series
    from memprobe.leak._windows import window_evidence
    from memprobe_rllib import CallbackOptions
    from memprobe_rllib._learners import LEARNER_PREFIX
    from memprobe_rllib._process import STEP_NAMES, ProcessProber

    pp = ProcessProber(CallbackOptions(diagnose=True, leak_check_every=None), "learner", 0,
                       prefix=LEARNER_PREFIX, step_name=STEP_NAMES["learner"]).start()
    kept = []
    try:
        for i in range(1, 31):
            start = time.process_time()
            while time.process_time() - start < 0.1:  # an update's CPU work, untraced
                sum(range(1000))
            for _ in range(16):  # 16 minibatches of 32 KiB each
                kept.append(np.ones(4096))
            pp.sample_all(i)
        history = list(pp.prober.history)
    finally:
        pp.prober.stop()
    series, _, _ = sample_series(history, LEARNER_PREFIX, judged_keys(LEARNER_PREFIX))
    seen = window_evidence(series, LEARNER_PREFIX)
    assert seen is not None and seen.windows >= 1, seen
    # The user's line keeps 512 KiB per iteration (and numpy's headers beside it).
    assert 0.9 * 512 * 1024 <= seen.user_per_step <= 1.2 * 512 * 1024, seen


#: The user's own list of observations, as a callback of theirs keeps them.
KEPT_OBSERVATIONS: list = []


def test_the_capture_names_the_users_list_not_rllibs_episodes_in_flight():
    """The alarm's capture in an EnvRunner whose user callback keeps every episode's
    observations (numpy arrays: no heap type to count), while RLlib's episodes in flight
    grow over the capture: "held by" must name the user's list that keeps what their
    line makes, not the holders of RLlib's episode buffers, the type that grew most (a
    real run's capture read ``InfiniteLookbackBuffer <- SingleAgentEpisode <- list[1] <-
    local 'done_episodes_to_return' of frame _sample``)."""
    import numpy as np
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from memprobe.capture import capture_culprits

    in_flight = []

    def step():
        in_flight.append(SingleAgentEpisode())  # RLlib's, returned after the capture
        KEPT_OBSERVATIONS.append(np.ones((64, 8)))  # the user's line: 4 KiB kept per step

    try:
        for _ in range(20):
            step()
        culprits = capture_culprits(1.0, step, native=False)
    finally:
        KEPT_OBSERVATIONS.clear()
        in_flight.clear()
    assert any("InfiniteLookbackBuffer" in t for t, _ in culprits.types), culprits.types
    assert culprits.holders, culprits
    text = str(culprits.holders[0])
    assert "KEPT_OBSERVATIONS" in text, [str(c) for c in culprits.holders]
    assert "InfiniteLookbackBuffer" not in text, text
