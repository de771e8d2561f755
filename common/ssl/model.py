"""The contrastive model that SimCLR, CARE, NCL and the poly-view/kernel losses share:
encoder + projector, two views, NT-Xent.

Methods subclass it: CARE adds an equivariance term to `training_step`, NCL overrides
`project` with a non-negative map, other papers swap `contrastive_loss`.
"""
from __future__ import annotations

import torch
from torch import nn

from common.data.transforms import to_float
from common.hardware import gather_with_grad
from common.ssl.augment import Augment, two_views
from common.ssl.losses import info_nce
from common.ssl.projector import Projector


class ContrastiveModel(nn.Module):
    """SimCLR's defaults (Chen et al. 2020): τ = 0.5 (their CIFAR setting), projector 2048 -> 128."""

    def __init__(self, encoder: nn.Module, feat_dim: int, temperature: float = 0.5, proj_hidden: int = 2048,
                 proj_dim: int = 128, augment: Augment | None = None):
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.augment = augment if augment is not None else Augment()
        self.encoder = encoder
        self.projector = Projector(feat_dim, proj_hidden, proj_dim)

    @staticmethod
    def normalize(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 - 1.0  # [0, 1] -> [-1, 1]

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """Encoder features (N, D) -> embedding (N, proj_dim) before L2-normalisation."""
        return self.projector(h)

    def embed(self, views: torch.Tensor) -> torch.Tensor:
        """Float views (N, C, H, W) in [0, 1] -> embedding (N, proj_dim), not normalised."""
        return self.project(self.encoder(self.normalize(views)))

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images -> encoder features (what the linear probe and kNN see)."""
        return self.encoder(self.normalize(to_float(images)))

    def contrastive_loss(self, x: torch.Tensor) -> torch.Tensor:
        """NT-Xent of two random views of float images x; every rank computes it over the
        global batch (all negatives), see `gather_with_grad`."""
        v1, v2 = two_views(x, self.augment)
        z1, z2 = self.embed(torch.cat([v1, v2])).chunk(2)   # one forward: BN sees both views
        return info_nce(gather_with_grad(z1), gather_with_grad(z2), self.temperature)

    def training_step(self, images: torch.Tensor):
        return self.contrastive_loss(to_float(images)), {}
