"""Kernel-InfoNCE model: SimCLR's encoder, projector and two views, with the loss swapped."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from common.hardware import gather_with_grad
from common.ssl import ContrastiveModel, two_views
from methods.kernel_infonce.loss import KERNELS, _check_kernel, kernel_infonce, kernel_loss_sum

# configs/method/simclr.yaml's ranges: the Python default only; runs pass `method.augment`
SIMCLR_AUGMENT = dict(min_scale=0.3, flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4)
OBJECTIVES = KERNELS + ("loss_sum",)


class KernelInfoNCE(ContrastiveModel):
    """Encoder + projector trained with `kernel_infonce(z1, z2, kernel, temperature, gamma, temperature2)`.

    kernel: one of KERNELS, or "loss_sum" for the official code's `loss_type=sum`
    (loss_sum_weight * L_exponential(gamma) + (1 - loss_sum_weight) * L_gaussian, one tau).
    augment: the augmentation ranges (an object with attributes, or a dict) of
    `common.ssl.sample_params`. kernel="gaussian" at temperature 2 tau is SimCLR at tau.
    """

    def __init__(self, encoder: torch.nn.Module, feat_dim: int, kernel: str = "simple_sum",
                 temperature: float = 0.5, gamma: float = 1.0, temperature2: float | None = None,
                 loss_sum_weight: float = 0.5, proj_hidden: int = 256, proj_dim: int = 64, augment=None):
        if kernel not in OBJECTIVES:
            raise ValueError(f"unknown kernel '{kernel}'; choose one of {', '.join(OBJECTIVES)}")
        _check_kernel("exponential" if kernel == "loss_sum" else kernel, temperature, gamma, temperature2)
        if kernel == "concat_sum" and proj_dim % 2:
            raise ValueError(f"concat_sum splits the embedding into two halves; proj_dim must be even, got {proj_dim}")
        if not 0 <= loss_sum_weight <= 1:
            raise ValueError(f"loss_sum_weight must lie in [0, 1], got {loss_sum_weight}")
        augment = SIMCLR_AUGMENT if augment is None else augment
        if isinstance(augment, dict):
            augment = SimpleNamespace(**augment)
        # ContrastiveModel still reads a config object; see README "Interface with common/ssl"
        super().__init__(encoder, feat_dim, SimpleNamespace(proj_hidden=proj_hidden, proj_dim=proj_dim,
                                                            temperature=temperature, augment=augment))
        self.kernel, self.temperature, self.gamma = kernel, temperature, gamma
        self.temperature2, self.loss_sum_weight = temperature2, loss_sum_weight

    def loss(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """The configured objective of two (N, d) embedding batches."""
        if self.kernel == "loss_sum":
            return kernel_loss_sum(z1, z2, self.temperature, self.gamma, self.loss_sum_weight)
        return kernel_infonce(z1, z2, self.kernel, self.temperature, self.gamma, self.temperature2)

    def contrastive_loss(self, x: torch.Tensor) -> torch.Tensor:
        """Kernel-InfoNCE of two random views of float images x (N, C, H, W), over the global batch."""
        v1, v2 = two_views(x, self.cfg.augment)
        z1, z2 = self.embed(torch.cat([v1, v2])).chunk(2)   # one forward: BN sees both views
        return self.loss(gather_with_grad(z1), gather_with_grad(z2))
