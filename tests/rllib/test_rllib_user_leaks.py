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
