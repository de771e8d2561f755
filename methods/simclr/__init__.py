"""SimCLR, the contrastive baseline that CARE and NCL build on. See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common import data, tasks
from methods.simclr.model import SimCLR


def build(cfg) -> SimCLR:
    """The model from the config alone (no data): encoder + projector."""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    return instantiate(cfg.method.model, encoder=encoder, feat_dim=feat_dim)


def run(cfg, ctx) -> dict[str, float]:
    """Pre-train on the train split, then linear-probe and kNN accuracy of frozen features."""
    return tasks.contrastive(ctx, build(cfg), data.image_splits(cfg.dataset), cfg.eval)


__all__ = ["SimCLR", "build", "run"]
