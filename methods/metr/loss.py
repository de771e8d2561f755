"""METR's objective (official metr/engine.py `train_one_epoch`) and EViT's keep-rate schedule
(helpers.adjust_keep_rate), as pure functions. The paper writes the total loss as
L = L_task + w_me L_me + w_sd L_sd (its Eq. 3-5); equation numbers below follow that order."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F


def _check_exits(exit_logits: Sequence[torch.Tensor], like: torch.Tensor, name: str) -> None:
    for i, z in enumerate(exit_logits):
        if z.shape != like.shape:
            raise ValueError(f"exit logits {i} have shape {tuple(z.shape)}, {name} {tuple(like.shape)}")


def multi_exit_loss(exit_logits: Sequence[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """Eq. 4, L_me = sum_m CE(z_m, y), each a batch mean (official `mid_loss`)."""
    if not len(exit_logits):
        return targets.new_zeros((), dtype=torch.float32)
    return sum(F.cross_entropy(z, targets) for z in exit_logits)


def self_distillation_loss(exit_logits: Sequence[torch.Tensor], final_logits: torch.Tensor,
                           tau: float = 1.0) -> torch.Tensor:
    """Eq. 5, L_sd = sum_m tau^2 KL(softmax(z_L / tau) || softmax(z_m / tau)), batch mean, the
    final exit z_L detached (the teacher gets no gradient). The official engine calls
    `utils.loss_kl(z_m, z_L, tau)`, absent from its repository: this form is our reading."""
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    _check_exits(exit_logits, final_logits, "final logits")
    if not len(exit_logits):
        return final_logits.new_zeros(())
    teacher = F.log_softmax(final_logits.detach() / tau, dim=-1)
    return sum(tau ** 2 * F.kl_div(F.log_softmax(z / tau, dim=-1), teacher, reduction="batchmean", log_target=True)
               for z in exit_logits)


def metr_loss(final_logits: torch.Tensor, exit_logits: Sequence[torch.Tensor], targets: torch.Tensor,
              me_weight: float = 0.15, sd_weight: float = 0.15, tau: float = 1.0) -> torch.Tensor:
    """Eq. 3, L = CE(z_L, y) + w_me L_me + w_sd L_sd (official defaults w_me = w_sd = 0.15, tau = 1).
    With both weights 0 it is plain cross-entropy (EViT's fine-tuning)."""
    if me_weight < 0 or sd_weight < 0:
        raise ValueError(f"loss weights must be >= 0, got me_weight={me_weight}, sd_weight={sd_weight}")
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    _check_exits(exit_logits, final_logits, "final logits")
    loss = F.cross_entropy(final_logits, targets)
    if me_weight:
        loss = loss + me_weight * multi_exit_loss(exit_logits, targets)
    if sd_weight:
        loss = loss + sd_weight * self_distillation_loss(exit_logits, final_logits, tau)
    return loss


def keep_rate_schedule(step: int, warmup_steps: int, shrink_steps: int, base_keep_rate: float) -> float:
    """EViT's adjust_keep_rate per step: 1 before `warmup_steps`; then
    rho + (1 - rho)(cos(pi t / T) + 1) / 2 for t = step - warmup_steps < T = shrink_steps; then rho."""
    if warmup_steps < 0 or shrink_steps < 0:
        raise ValueError(f"warmup_steps and shrink_steps must be >= 0, got {warmup_steps}, {shrink_steps}")
    if not 0 < base_keep_rate <= 1:
        raise ValueError(f"base_keep_rate must be in (0, 1], got {base_keep_rate}")
    if step < warmup_steps:
        return 1.0
    t = step - warmup_steps
    if t >= shrink_steps:
        return float(base_keep_rate)
    return base_keep_rate + (1 - base_keep_rate) * (math.cos(t / shrink_steps * math.pi) + 1) * 0.5


@dataclass(frozen=True)
class KeepSchedule:
    """The keep rate while fine-tuning (`method.train_keep`, a typed `_target_` block): EViT's
    adjust_keep_rate as `keep_rate_schedule(step, warmup_steps, shrink_steps, base_keep_rate)`.
    Defaults are the official METR training (metr/main.py --base_keep_rate 0.7; the launch script
    metr/small_ratio_midw_kdw_kdt_ckpt.sh --shrink_start_epoch 0 --shrink_epochs 0): rho from step 0,
    the model reducing at its drop blocks in every training step. base_keep_rate 1: no reduction."""
    base_keep_rate: float = 0.7
    warmup_steps: int = 0
    shrink_steps: int = 0

    def __post_init__(self):
        keep_rate_schedule(0, self.warmup_steps, self.shrink_steps, self.base_keep_rate)   # ValueError on bad input

    def __call__(self, step: int) -> float:
        return keep_rate_schedule(step, self.warmup_steps, self.shrink_steps, self.base_keep_rate)


__all__ = ["KeepSchedule", "keep_rate_schedule", "metr_loss", "multi_exit_loss", "self_distillation_loss"]
