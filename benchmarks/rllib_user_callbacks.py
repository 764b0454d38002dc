"""A user's RLlib callback that keeps every episode's observations (a leak in the EnvRunner)."""
import numpy as np
from ray.rllib.callbacks.callbacks import RLlibCallback
from memprobe_rllib import MemoryProbeCallback

EPISODES = []


class EpisodeKeeper(RLlibCallback):
    def on_episode_end(self, *, episode, **kwargs):
        EPISODES.append(np.array(episode.get_observations(), dtype=np.float64).repeat(8, axis=0))


class MyCallbacks(MemoryProbeCallback):
    def on_episode_end(self, *, episode, **kwargs):
        super().on_episode_end(episode=episode, **kwargs)
        EPISODES.append(np.array(episode.get_observations(), dtype=np.float64).repeat(8, axis=0))
