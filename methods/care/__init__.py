"""CARE: Contrastive Augmentation-induced Rotational Equivariance (ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common import data, tasks
from common.tasks.contrastive import evaluation_splits
from common.config import UserError
from methods.care.colour import tint_splits
from methods.care.evaluate import equivariance_metrics
from methods.care.loss import care_loss, equivariance_loss, uniformity_loss
from methods.care.metrics import relative_equivariance, sensitivity_r2, wahba_error
from methods.care.model import CARE, Views


def build(cfg) -> CARE:
    """The model from the config alone (no data): encoder + projector + CARE's terms."""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    return instantiate(cfg.method.model, encoder=encoder, feat_dim=feat_dim)


def splits_of(cfg) -> dict[str, tuple]:
    """The image splits, tinted when the dataset asks for it (`dataset.tint: hue`)."""
    splits = data.image_splits(cfg.dataset)
    tint = cfg.dataset.get("tint")
    if tint is not None:
        if tint != "hue" or cfg.dataset.in_chans != 3:
            raise UserError(f"dataset.tint must be 'hue' with dataset.in_chans: 3, got tint={tint!r}, "
                            f"in_chans={cfg.dataset.in_chans}", exit_code=2)
        splits = tint_splits(splits)
    return splits


def run(cfg, ctx) -> dict[str, float]:
    """Pre-train with L_base + λ·L_equi, then probe/kNN accuracy and the equivariance metrics,
    all scored on the split `eval.on` names (test, or validation images for tuning)."""
    splits = splits_of(cfg)
    fit, score = evaluation_splits(splits, cfg.eval)        # the metrics read the probe's splits
    metrics = instantiate(cfg.method.metrics)              # equivariance_metrics with its knobs bound
    hue = cfg.dataset.get("tint") == "hue"
    return tasks.contrastive(ctx, build(cfg), splits, cfg.eval, extra_metrics=lambda m: metrics(
        m, {"eval_train": fit, "test": score}, ctx.device, hue_attribute=hue))


__all__ = ["CARE", "Views", "build", "care_loss", "equivariance_loss", "equivariance_metrics",
           "relative_equivariance", "run", "sensitivity_r2", "uniformity_loss", "wahba_error"]
