"""Self-supervised pre-training on unlabelled images, then frozen-feature evaluation (linear
probe and kNN, knobs from the `eval: ssl` config group)."""
from __future__ import annotations

from typing import Callable

import torch

from common.eval import extract, knn_accuracy, linear_probe
from common.tasks.base import fit_and_evaluate


def evaluation_splits(splits: dict, eval_cfg) -> tuple[tuple, tuple]:
    """(fit, score) splits: (eval_train, test), or with `eval.on: val` (eval_train without its
    last `val_size` images, those images): hyper-parameters are chosen on the latter, never on test."""
    if eval_cfg.on == "test":
        return splits["eval_train"], splits["test"]
    if eval_cfg.on != "val":
        raise ValueError(f"eval.on must be 'test' or 'val', got '{eval_cfg.on}'")
    x, y = splits["eval_train"]
    if not 0 < eval_cfg.val_size < len(x):
        raise ValueError(f"eval.val_size must be in (0, {len(x)}) (the eval_train images), got {eval_cfg.val_size}")
    cut = len(x) - eval_cfg.val_size
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def frozen_feature_metrics(features_fn, splits: dict, eval_cfg, device, seed: int) -> dict[str, float]:
    """Linear-probe and kNN accuracy (%) of frozen features, fit and scored as `eval.on` says."""
    (fit_x, tr_y), (score_x, te_y) = evaluation_splits(splits, eval_cfg)
    tr_x = extract(features_fn, fit_x, eval_cfg.batch_size, device)
    te_x = extract(features_fn, score_x, eval_cfg.batch_size, device)
    return {"linear_acc": linear_probe(tr_x, tr_y, te_x, te_y, max_iter=eval_cfg.probe.max_iter,
                                       C=eval_cfg.probe.C, seed=seed),
            "knn_acc": knn_accuracy(tr_x, tr_y, te_x, te_y, k=eval_cfg.knn.k,
                                    temperature=eval_cfg.knn.temperature)}


def contrastive(ctx, model: torch.nn.Module, splits: dict, eval_cfg,
                extra_metrics: Callable[[torch.nn.Module], dict] | None = None, **fit_kw) -> dict[str, float]:
    """Train `model.training_step(uint8 images)` on this rank's share of `splits['train']`;
    evaluate `model.features` frozen, plus `extra_metrics(model)`."""
    images = splits["train"][0]
    sampler = ctx.sampler(len(images))

    def evaluate(m):
        out = frozen_feature_metrics(m.features, splits, eval_cfg, ctx.device, ctx.seed)
        if extra_metrics is not None:
            out.update(extra_metrics(m))
        return out

    return fit_and_evaluate(ctx, model, lambda step: images[sampler(step)].to(ctx.device), evaluate, **fit_kw)
