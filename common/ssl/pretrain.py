"""The run of a contrastive method: pre-train on the train split, then evaluate frozen features."""
from __future__ import annotations

from typing import Callable

import torch

from common import data, runner
from common.nn import build_backbone
from common.ssl.evaluate import extract, knn_accuracy, linear_probe
from common.trainer import Trainer


def evaluate_features(features_fn, splits, device, seed: int) -> dict[str, float]:
    """Linear-probe and kNN accuracy (%) of frozen features on the test split."""
    tr_x = extract(features_fn, splits["eval_train"][0], device=device)
    te_x = extract(features_fn, splits["test"][0], device=device)
    tr_y, te_y = splits["eval_train"][1], splits["test"][1]
    return {"linear_acc": linear_probe(tr_x, tr_y, te_x, te_y, seed=seed),
            "knn_acc": knn_accuracy(tr_x, tr_y, te_x, te_y)}


def run_contrastive(cfg, model_cls, extra_metrics: Callable | None = None) -> dict[str, float]:
    """Build `model_cls(encoder, feat_dim, cfg.method)`, train it with common.trainer, and
    return linear/kNN accuracy plus `extra_metrics(model, splits, device)`."""
    ctx = runner.start(cfg)
    splits = data.image_splits(cfg.dataset)
    encoder, feat_dim = build_backbone(cfg.method.backbone, cfg.dataset.in_chans, cfg.dataset.img_size)
    model = model_cls(encoder, feat_dim, cfg.method)
    train_x = splits["train"][0]
    sampler = data.StepSampler(len(train_x), cfg.trainer.batch_size, cfg.seed, ctx.hw.rank, ctx.hw.world_size)
    trainer = Trainer(model, cfg.trainer, ctx.hw, ctx.run_dir, ctx.logger,
                      batch_fn=lambda step: train_x[sampler(step)].to(ctx.hw.device))
    last = trainer.fit(resume=cfg.resume)
    model.eval()
    with torch.no_grad():
        metrics = evaluate_features(model.features, splits, ctx.hw.device, cfg.seed)
        if extra_metrics is not None:
            metrics.update(extra_metrics(model, splits, ctx.hw.device))
    if "loss" in last:  # rows with max_steps=0 (references) have no training loss
        metrics["train_loss"] = last["loss"]
    ctx.logger.log(metrics, trainer.step)
    ctx.logger.close()
    return metrics
