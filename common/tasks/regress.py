"""Regression on a list of items (crystals, graphs): minibatches through a collate function,
then the mean absolute error of the final (or averaged) model on validation and test."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from common.tasks.base import fit_and_evaluate


def regress(ctx, model: torch.nn.Module, train: Sequence, collate: Callable[[list], object],
            evaluate: Callable[[torch.nn.Module], dict], **fit_kw) -> dict[str, float]:
    """`model.training_step(collate(items))` on this rank's share of each global batch."""
    sampler = ctx.sampler(len(train))
    return fit_and_evaluate(ctx, model, lambda step: collate([train[i] for i in sampler(step).tolist()]),
                            evaluate, **fit_kw)
