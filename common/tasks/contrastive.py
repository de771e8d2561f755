"""Self-supervised pre-training on unlabelled images, then frozen-feature evaluation (linear
probe and kNN, knobs from the `eval: ssl` config group)."""
from __future__ import annotations

from typing import Callable

import torch

from common.eval import extract, knn_accuracy, linear_probe
from common.tasks.base import fit_and_evaluate


def frozen_feature_metrics(features_fn, splits: dict, eval_cfg, device, seed: int) -> dict[str, float]:
    """Linear-probe and kNN accuracy (%) on the test split of features fit on `eval_train`."""
    tr_x = extract(features_fn, splits["eval_train"][0], eval_cfg.batch_size, device)
    te_x = extract(features_fn, splits["test"][0], eval_cfg.batch_size, device)
    tr_y, te_y = splits["eval_train"][1], splits["test"][1]
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
