"""Poly-view contrastive learning (Shidani et al., ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from common import data, tasks
from common.config import UserError
from methods.polyview.loss import (LOSSES, arithmetic_pvc, geometric_pvc, multi_crop, pair_log_likelihoods,
                                   poly_view_loss, sufficient_statistics)
from methods.polyview.model import PolyView
from methods.polyview.views import images_per_step


def build(cfg) -> PolyView:
    """The model from the config alone (no data): encoder + projector, M views, the chosen loss.
    A bad model argument (views < 2, an unknown loss) is a config error naming it."""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    try:
        return instantiate(cfg.method.model, encoder=encoder, feat_dim=feat_dim)
    except InstantiationException as err:
        if isinstance(err.__cause__, ValueError):
            raise UserError(f"method.model: {err.__cause__}", exit_code=2) from err
        raise


def run(cfg, ctx) -> dict[str, float]:
    """Pre-train with M views per image, then linear-probe and kNN accuracy of frozen features."""
    return tasks.contrastive(ctx, build(cfg), data.image_splits(cfg.dataset), cfg.eval)


__all__ = ["LOSSES", "PolyView", "arithmetic_pvc", "build", "geometric_pvc", "images_per_step", "multi_crop",
           "pair_log_likelihoods", "poly_view_loss", "run", "sufficient_statistics"]
