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
