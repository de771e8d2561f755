"""NCL: Non-negative Contrastive Learning (ICLR 2024), and its supervised analogue NCE. See README.md."""
from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate

from common import data, tasks
from methods.ncl.evaluate import feature_metrics, interpretability, supervised_metrics
from methods.ncl.loss import nce_logits, nonneg
from methods.ncl.metrics import (class_consistency, class_consistency_pos, conditional_mi, effective_rank,
                                 infonce_mi, orthogonality, orthogonality_corr, sepin_at_k, sparsity,
                                 top_dimensions)
from methods.ncl.model import NCL, NonNegClassifier

MODES = ("contrastive", "supervised")


def build(cfg) -> NCL | NonNegClassifier:
    """The model from the config alone: `method.model` (CL / NCL) when `method.mode` is
    contrastive, `method.classifier` (CE / NCE) when it is supervised."""
    ds = cfg.dataset
    if cfg.method.mode not in MODES:
        raise ValueError(f"method.mode must be one of {MODES}, got '{cfg.method.mode}'")
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=ds.in_chans, img_size=ds.img_size)
    if cfg.method.mode == "supervised":
        return instantiate(cfg.method.classifier, encoder=encoder, feat_dim=feat_dim, num_classes=ds.num_classes)
    return instantiate(cfg.method.model, encoder=encoder, feat_dim=feat_dim)


def supervised_splits(splits: dict, val_size: int) -> tuple[tuple, tuple, str]:
    """(train, scored, split name): the train and test splits, or with `val_size` > 0 the training
    images without their last `val_size`, scored on those (tuning: the test split is never read)."""
    if not val_size:
        return splits["train"], splits["test"], "test"
    x, y = splits["train"]
    if not 0 < val_size < len(x):
        raise ValueError(f"method.val_size must be in [0, {len(x)}) (the training images), got {val_size}")
    cut = len(x) - val_size
    return (x[:cut], y[:cut]), (x[cut:], y[cut:]), "val"


def run(cfg, ctx) -> dict[str, float]:
    """Contrastive: pre-train, then probe/kNN (common.tasks.contrastive) and the interpretability
    metrics of z, scored as `eval.on` says (test, or held-out eval_train images for tuning).
    Supervised: train the classifier (common.tasks.classify), then test accuracy and the same
    metrics of its penultimate features."""
    splits = data.image_splits(cfg.dataset)
    model, m = build(cfg), cfg.method.metrics
    if cfg.method.mode == "supervised":
        train, score, split = supervised_splits(splits, cfg.method.val_size)
        out = tasks.classify(ctx, model, train, score, eval_batch_size=cfg.eval.batch_size,
                             extra_metrics=lambda net: supervised_metrics(net, score, cfg.eval.batch_size,
                                                                          ctx.device, m.eps))
        return {("val_acc" if k == "test_acc" and split == "val" else k): v for k, v in out.items()}
    fit, score = tasks.evaluation_splits(splits, cfg.eval)       # `eval.on: val` never reads test
    return tasks.contrastive(ctx, model, splits, cfg.eval, extra_metrics=lambda net: interpretability(
        net, fit, score, cfg.eval, ctx.device, ctx.seed, Path(ctx.run_dir), eps=m.eps, select_k=m.select_k,
        sepin_k=m.sepin_k, sepin_images=m.sepin_images, views_seed=m.views_seed, figure_dims=m.figure_dims))


__all__ = ["NCL", "NonNegClassifier", "build", "supervised_splits", "class_consistency", "class_consistency_pos", "conditional_mi",
           "effective_rank", "feature_metrics", "infonce_mi", "interpretability", "nce_logits", "nonneg",
           "orthogonality", "orthogonality_corr", "run", "sepin_at_k", "sparsity", "supervised_metrics",
           "top_dimensions"]
