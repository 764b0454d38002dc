"""A user's own RLlib callbacks, beside memprobe's (imported by the EnvRunners in the tests):
each ``on_episode_end`` logs an episode count of the user's and keeps the episode's
observations, as a user's logging callback might."""

import numpy as np
from ray.rllib.callbacks.callbacks import RLlibCallback

from memprobe_rllib import MemoryProbeCallback

KEPT = []


def _keep(episode, metrics_logger):
    KEPT.append(np.asarray(episode.get_observations()))
    if metrics_logger is not None:
        metrics_logger.log_value("user/episodes", 1, reduce="sum")


class UserCallbacks(RLlibCallback):
    """A separate class, given beside memprobe's in a list."""

    def on_episode_end(self, *, episode, metrics_logger=None, **kwargs):
        _keep(episode, metrics_logger)


class UserProbeCallbacks(MemoryProbeCallback):
    """A subclass of memprobe's callback whose hook calls ``super()`` first."""

    def on_episode_end(self, *, episode, metrics_logger=None, **kwargs):
        super().on_episode_end(episode=episode, metrics_logger=metrics_logger, **kwargs)
        _keep(episode, metrics_logger)
