"""The trajectory matching loss of one iteration (MTT Eq. 2, DATM Eq. 1 with soft labels)."""
from __future__ import annotations

import torch
from torch import nn

from common.distill import SyntheticSet, param_matching_loss, target_loss, unrolled_sgd


def matching_loss(module: nn.Module, synthetic: SyntheticSet, trajectory: torch.Tensor, start_epoch: int,
                  expert_epochs: int, syn_steps: int, batch_size: int, generator: torch.Generator | None = None):
    """(L, theta_hat_N): theta_hat_0 = theta*_t; N = syn_steps student steps with lr synthetic.lr on
    (X_B, Y_B) (soft cross-entropy when synthetic.targets is float, CE on int labels);
    L = ||theta_hat_N - theta*_{t+M}||^2 / ||theta*_t - theta*_{t+M}||^2, M = expert_epochs.
    `trajectory` (T + 1, P) is one expert's snapshots."""
    num_params = sum(p.numel() for p in module.parameters())
    if trajectory.dim() != 2 or trajectory.shape[1] != num_params:
        raise ValueError(f"the expert buffer holds {trajectory.shape[-1]} parameters per snapshot, "
                         f"the network has {num_params}")
    last = len(trajectory) - 1
    if start_epoch < 0 or start_epoch + expert_epochs > last:
        raise ValueError(f"start_epoch + expert_epochs = {start_epoch} + {expert_epochs} exceeds the expert's "
                         f"{last} epochs")
    if synthetic.lr is None:
        raise ValueError("the synthetic set needs an lr (the student's step size)")
    start, target = trajectory[start_epoch], trajectory[start_epoch + expert_epochs]
    end = unrolled_sgd(module, start, synthetic.images, synthetic.targets, synthetic.lr, syn_steps, batch_size,
                       target_loss, generator)
    return param_matching_loss(end, start, target), end
