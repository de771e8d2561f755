"""Soft MoE: From Sparse to Soft Mixtures of Experts (ICLR 2024). See README.md."""
from __future__ import annotations

import torch

from common import data, runner
from common.ssl import extract
from common.trainer import Trainer
from methods.soft_moe.layers import Experts, SoftMoE
from methods.soft_moe.model import ROUTERS, MoEViT, moe_layer
from methods.soft_moe.routers import ExpertsChoice, TokensChoice


def run(cfg) -> dict[str, float]:
    """Train the ViT with `method.router` on the train split; report test accuracy, the
    parameter count and (sparse routers) the fraction of dropped tokens."""
    ctx = runner.start(cfg)
    splits = data.image_splits(cfg.dataset)
    model = MoEViT(cfg.method, cfg.dataset.img_size, cfg.dataset.in_chans, cfg.dataset.num_classes)
    x, y = splits["train"]
    sampler = data.StepSampler(len(x), cfg.trainer.batch_size, cfg.seed, ctx.hw.rank, ctx.hw.world_size)
    trainer = Trainer(model, cfg.trainer, ctx.hw, ctx.run_dir, ctx.logger,
                      batch_fn=lambda s: (x[sampler(s)].to(ctx.hw.device), y[sampler(s)].to(ctx.hw.device)))
    last = trainer.fit(resume=cfg.resume)
    model.eval()
    te_x, te_y = splits["test"]
    with torch.no_grad():
        logits = extract(model, te_x, device=ctx.hw.device)
    metrics = {"test_acc": float(100 * (logits.argmax(1) == te_y).float().mean()),
               "params_m": sum(p.numel() for p in model.parameters()) / 1e6}
    if "loss" in last:
        metrics["train_loss"] = last["loss"]
    if "dropped" in last:
        metrics["train_dropped"] = last["dropped"]
    ctx.logger.log(metrics, trainer.step)
    ctx.logger.close()
    return metrics


__all__ = ["Experts", "ExpertsChoice", "MoEViT", "ROUTERS", "SoftMoE", "TokensChoice", "moe_layer", "run"]
