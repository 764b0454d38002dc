"""A user's PPO Learner that keeps a numpy copy of every minibatch and 256 KiB of
numpy per minibatch besides (a leak in the Learner, where memprobe samples once per
``train()`` iteration). Importable by Ray's workers (tests/rllib is on their path)."""

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

DEBUG_BATCHES: list = []


class KeepingLearner(PPOTorchLearner):
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        loss = super().compute_loss_for_module(module_id=module_id, config=config,
                                               batch=batch, fwd_out=fwd_out)
        kept = {k: v.detach().cpu().numpy().copy() for k, v in batch.items()
                if torch.is_tensor(v)}
        kept["debug"] = np.ones(32768)  # 256 KiB
        DEBUG_BATCHES.append(kept)
        return loss
