"""Supervised classification: minibatches of (inputs, labels), then top-1 test accuracy."""
from __future__ import annotations

from typing import Callable

import torch

from common.eval import model_accuracy
from common.tasks.base import fit_and_evaluate


def classify(ctx, model: torch.nn.Module, train: tuple[torch.Tensor, torch.Tensor],
             test: tuple[torch.Tensor, torch.Tensor], *, eval_batch_size: int,
             extra_metrics: Callable[[torch.nn.Module], dict] | None = None, **fit_kw) -> dict[str, float]:
    """`model.training_step((x, y))` on this rank's share of each global batch; `test_acc` (%)
    of the final model and whatever `extra_metrics(model)` adds."""
    x, y = train
    sampler = ctx.sampler(len(x))

    def batches(step: int):
        idx = sampler(step)
        return x[idx].to(ctx.device), y[idx].to(ctx.device)

    def evaluate(m):
        out = {"test_acc": model_accuracy(m, test, eval_batch_size, ctx.device)}
        if extra_metrics is not None:
            out.update(extra_metrics(m))
        return out

    return fit_and_evaluate(ctx, model, batches, evaluate, **fit_kw)
