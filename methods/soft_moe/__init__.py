"""Soft MoE: From Sparse to Soft Mixtures of Experts (ICLR 2024). See README.md."""
from __future__ import annotations

import torch
from hydra.utils import instantiate

from common import data, tasks
from methods.soft_moe.layers import Experts, SoftMoE, normalised_entropy
from methods.soft_moe.model import ROUTERS, MoEViT, moe_layer
from methods.soft_moe.routers import ExpertsChoice, TokensChoice

VALIDATION_SEED = 3   # the permutation that carves validation images out of the train split


def build(cfg, kernels: str = "reference") -> MoEViT:
    """The model from the config alone; `run` passes `kernels` from `hardware.kernels`."""
    ds = cfg.dataset
    return instantiate(cfg.method.model, img_size=ds.img_size, in_chans=ds.in_chans, num_classes=ds.num_classes,
                       kernels=kernels)


def train_and_eval_splits(cfg) -> tuple[tuple, tuple, str]:
    """(train, evaluation split, its name): the test split, or with `method.val_size` = N the
    last N of a fixed permutation of the train split (tuning: hyper-parameters are chosen there,
    never on test), trained on the rest."""
    splits = data.image_splits(cfg.dataset)
    if cfg.method.val_size is None:
        return splits["train"], splits["test"], "test"
    x, y = splits["train"]
    n = int(cfg.method.val_size)
    if not 0 < n < len(y):
        raise ValueError(f"method.val_size must be in (0, {len(y)}) (the train images), got {n}")
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(VALIDATION_SEED))
    train, val = perm[:-n], perm[-n:]
    return (x[train], y[train]), (x[val], y[val]), "val"


def run(cfg, ctx) -> dict[str, float]:
    """Train the ViT with `method.model.router`; report test (or validation) accuracy, the
    parameter count, (sparse routers) the fraction of tokens dropped in training and (Soft MoE
    layers) the learned scale and routing entropies per block on `method.stats_images` images."""
    train, held, split = train_and_eval_splits(cfg)
    model = build(cfg, kernels=ctx.hw.kernels)

    def routing(m):
        return m.routing_stats(held[0][:cfg.method.stats_images].to(ctx.device)) if cfg.method.stats_images else {}

    metrics = tasks.classify(ctx, model, train, held, eval_batch_size=cfg.eval.batch_size, extra_metrics=routing)
    if split == "val":
        metrics["val_acc"] = metrics.pop("test_acc")
    metrics["params_m"] = sum(p.numel() for p in model.parameters()) / 1e6
    if model.router in ("tokens_choice", "experts_choice"):
        metrics["train_dropped"] = float(model.last_dropped)
    return metrics


__all__ = ["Experts", "ExpertsChoice", "MoEViT", "ROUTERS", "SoftMoE", "TokensChoice", "build", "moe_layer",
           "normalised_entropy", "run"]
