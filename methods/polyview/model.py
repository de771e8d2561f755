"""Poly-view contrastive model: SimCLR's encoder and projector, M views per image, a poly-view loss."""
from __future__ import annotations

from types import SimpleNamespace

import torch
from einops import rearrange

from common.hardware import gather_with_grad
from common.ssl import ContrastiveModel
from methods.polyview.loss import LOSSES, poly_view_loss
from methods.polyview.views import multi_views

# configs/method/simclr.yaml's ranges: the Python default only; runs pass `method.augment`
SIMCLR_AUGMENT = dict(min_scale=0.3, flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4)


class PolyView(ContrastiveModel):
    """Encoder + projector trained with `poly_view_loss(z, temperature, loss)` on M views.

    augment: the augmentation ranges (an object with attributes, or a dict) of
    `common.ssl.sample_params`. views = 2 with loss "geometric" is SimCLR.
    """

    def __init__(self, encoder: torch.nn.Module, feat_dim: int, views: int = 8, loss: str = "geometric",
                 temperature: float = 0.5, proj_hidden: int = 256, proj_dim: int = 64, augment=None):
        if views < 2:
            raise ValueError(f"PolyView needs views >= 2 per image, got views = {views}")
        if loss not in LOSSES:
            raise ValueError(f"unknown poly-view loss '{loss}'; choose one of {', '.join(LOSSES)}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        augment = SIMCLR_AUGMENT if augment is None else augment
        if isinstance(augment, dict):
            augment = SimpleNamespace(**augment)
        # ContrastiveModel still reads a config object; see README "Interface with common/ssl"
        super().__init__(encoder, feat_dim, SimpleNamespace(proj_hidden=proj_hidden, proj_dim=proj_dim,
                                                            temperature=temperature, augment=augment))
        self.views, self.loss_kind, self.temperature = views, loss, temperature

    def contrastive_loss(self, x: torch.Tensor) -> torch.Tensor:
        """The poly-view loss of M random views of float images x (N, C, H, W); every rank
        computes it over the global batch (all negatives), as ContrastiveModel does."""
        v = multi_views(x, self.views, self.cfg.augment)                        # (N, M, C, H, W)
        z = self.embed(rearrange(v, "n m c h w -> (n m) c h w"))               # one forward: BN sees all views
        z = rearrange(z, "(n m) d -> n m d", m=self.views)
        return poly_view_loss(gather_with_grad(z), self.temperature, self.loss_kind)
