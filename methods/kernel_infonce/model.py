"""Kernel-InfoNCE model: SimCLR's encoder, projector and two views, with the loss swapped."""
from __future__ import annotations

import torch

from common.hardware import gather_with_grad
from common.ssl import Augment, ContrastiveModel, two_views
from common.ssl.augment import autocast_off
from methods.kernel_infonce.loss import KERNELS, _check_kernel, kernel_infonce, kernel_loss_sum

OBJECTIVES = KERNELS + ("loss_sum",)
READS_GAMMA = ("exponential", "simple_sum", "concat_sum", "loss_sum")
READS_TEMPERATURE2 = ("simple_sum", "concat_sum")


class KernelInfoNCE(ContrastiveModel):
    """Encoder + projector trained with `kernel_infonce(z1, z2, kernel, temperature, gamma, temperature2)`.

    kernel: one of KERNELS, or "loss_sum" for the official code's `loss_type=sum`
    (loss_sum_weight * L_exponential(gamma) + (1 - loss_sum_weight) * L_gaussian, one tau).
    gamma (None: 1), temperature2 (None: tau) and loss_sum_weight (None: 0.5) are read only by
    the kernels that use them; setting one for another kernel is an error, so that no config key
    is a silent no-op. guarded: the official code's 1e-6 guards on the denominator (`kernel_infonce`);
    read by every kernel. Defaults: the paper's best kernel (Simple Sum, gamma = 1) and the official
    projector (2048 -> 128); kernel="gaussian" at temperature 2 tau is SimCLR at tau.
    """

    def __init__(self, encoder: torch.nn.Module, feat_dim: int, kernel: str = "simple_sum",
                 temperature: float = 0.5, gamma: float | None = None, temperature2: float | None = None,
                 loss_sum_weight: float | None = None, guarded: bool = False, proj_hidden: int = 2048,
                 proj_dim: int = 128, augment: Augment | None = None):
        if not isinstance(guarded, bool):
            raise ValueError(f"guarded must be true or false, got {guarded!r}")
        if kernel not in OBJECTIVES:
            raise ValueError(f"unknown kernel '{kernel}'; choose one of {', '.join(OBJECTIVES)}")
        for name, value, readers in (("gamma", gamma, READS_GAMMA), ("temperature2", temperature2, READS_TEMPERATURE2),
                                     ("loss_sum_weight", loss_sum_weight, ("loss_sum",))):
            if value is not None and kernel not in readers:
                raise ValueError(f"kernel '{kernel}' does not read {name} (= {value}); set it to null "
                                 f"(read by {', '.join(readers)})")
        gamma = 1.0 if gamma is None else gamma
        loss_sum_weight = 0.5 if loss_sum_weight is None else loss_sum_weight
        _check_kernel("exponential" if kernel == "loss_sum" else kernel, temperature, gamma, temperature2)
        if kernel == "concat_sum" and proj_dim % 2:
            raise ValueError(f"concat_sum splits the embedding into two halves; proj_dim must be even, got {proj_dim}")
        if not 0 <= loss_sum_weight <= 1:
            raise ValueError(f"loss_sum_weight must lie in [0, 1], got {loss_sum_weight}")
        super().__init__(encoder, feat_dim, temperature, proj_hidden, proj_dim, augment)
        self.kernel, self.gamma = kernel, gamma
        self.temperature2, self.loss_sum_weight, self.guarded = temperature2, loss_sum_weight, guarded

    def loss(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """The configured objective of two (N, d) embedding batches, in at least float32 with autocast
        off: under bf16 autocast the a.b matmul of |a|^2 + |b|^2 - 2 a.b would round |a - b|^2 by up to
        ~5e-3, which d^gamma with gamma < 2 and a small tau amplify (the official code computes its
        distances with cdist/norm, which fp16 autocast runs in float32). float64 stays float64."""
        dtype = torch.promote_types(z1.dtype, torch.float32)
        with autocast_off(z1.device.type):
            z1, z2 = z1.to(dtype), z2.to(dtype)
            if self.kernel == "loss_sum":
                return kernel_loss_sum(z1, z2, self.temperature, self.gamma, self.loss_sum_weight, self.guarded)
            return kernel_infonce(z1, z2, self.kernel, self.temperature, self.gamma, self.temperature2, self.guarded)

    def contrastive_loss(self, x: torch.Tensor) -> torch.Tensor:
        """Kernel-InfoNCE of two random views of float images x (N, C, H, W), over the global batch."""
        v1, v2 = two_views(x, self.augment)
        z1, z2 = self.embed(torch.cat([v1, v2])).chunk(2)   # one forward: BN sees both views
        return self.loss(gather_with_grad(z1), gather_with_grad(z2))
