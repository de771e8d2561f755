"""Soft MoE: From Sparse to Soft Mixtures of Experts (ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common import data, tasks
from methods.soft_moe.layers import Experts, SoftMoE
from methods.soft_moe.model import ROUTERS, MoEViT, moe_layer
from methods.soft_moe.routers import ExpertsChoice, TokensChoice


def build(cfg) -> MoEViT:
    ds = cfg.dataset
    return instantiate(cfg.method.model, img_size=ds.img_size, in_chans=ds.in_chans, num_classes=ds.num_classes)


def run(cfg, ctx) -> dict[str, float]:
    """Train the ViT with `method.model.router` on the train split; report test accuracy, the
    parameter count and (sparse routers) the fraction of dropped tokens in training."""
    splits = data.image_splits(cfg.dataset)
    model = build(cfg)
    metrics = tasks.classify(ctx, model, splits["train"], splits["test"], eval_batch_size=cfg.eval.batch_size)
    metrics["params_m"] = sum(p.numel() for p in model.parameters()) / 1e6
    if model.router in ("tokens_choice", "experts_choice"):
        metrics["train_dropped"] = float(model.last_dropped)
    return metrics


__all__ = ["Experts", "ExpertsChoice", "MoEViT", "ROUTERS", "SoftMoE", "TokensChoice", "build", "moe_layer", "run"]
