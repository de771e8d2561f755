"""Poly-view contrastive model: SimCLR's encoder and projector, M views per image, a poly-view loss."""
from __future__ import annotations

import torch
from einops import rearrange

from common.hardware import gather_with_grad
from common.ssl import Augment, ContrastiveModel, multi_views
from methods.polyview.loss import LOSSES, poly_view_loss


class PolyView(ContrastiveModel):
    """Encoder + projector trained with `poly_view_loss(z, temperature, loss)` on M views per image.

    Defaults: M = 8 and Geometric PVC, the paper's headline ImageNet run (abstract: batch 256,
    M = 8, 128 epochs); projector 2048 -> 128 and τ = 0.5 as `ContrastiveModel`, i.e. SimCLR's
    (Chen et al. 2020; 0.5 is their CIFAR-10 value, their ImageNet runs use 0.1). τ = 0.5 is not
    the poly-view paper's: its τ could not be read here (no official code was released; README,
    Deviations). views = 2 with loss "geometric" is SimCLR.
    """

    def __init__(self, encoder: torch.nn.Module, feat_dim: int, views: int = 8, loss: str = "geometric",
                 temperature: float = 0.5, proj_hidden: int = 2048, proj_dim: int = 128,
                 augment: Augment | None = None):
        if views < 2:
            raise ValueError(f"PolyView needs views >= 2 per image, got views = {views}")
        if loss not in LOSSES:
            raise ValueError(f"unknown poly-view loss '{loss}'; choose one of {', '.join(LOSSES)}")
        super().__init__(encoder, feat_dim, temperature, proj_hidden, proj_dim, augment)
        self.views, self.loss_kind = views, loss

    def contrastive_loss(self, x: torch.Tensor) -> torch.Tensor:
        """The poly-view loss of M random views of float images x (N, C, H, W); every rank
        computes it over the global batch (all negatives), as ContrastiveModel does."""
        v = multi_views(x, self.views, self.augment)                           # (N, M, C, H, W)
        z = self.embed(rearrange(v, "n m c h w -> (n m) c h w"))               # one forward: BN sees all views
        z = rearrange(z, "(n m) d -> n m d", m=self.views)
        return poly_view_loss(gather_with_grad(z), self.temperature, self.loss_kind)
