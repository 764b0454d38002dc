"""A user's PPO learner that keeps a debug copy of every minibatch (a leak in the Learner)."""
import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

DEBUG_BATCHES = []


class NumpyKeepingLearner(PPOTorchLearner):
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        loss = super().compute_loss_for_module(module_id=module_id, config=config,
                                               batch=batch, fwd_out=fwd_out)
        DEBUG_BATCHES.append({k: v.detach().cpu().numpy().copy() for k, v in batch.items() if torch.is_tensor(v)})
        return loss


class TorchKeepingLearner(PPOTorchLearner):
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        loss = super().compute_loss_for_module(module_id=module_id, config=config,
                                               batch=batch, fwd_out=fwd_out)
        DEBUG_BATCHES.append({k: v.detach().clone() for k, v in batch.items() if torch.is_tensor(v)})
        return loss
