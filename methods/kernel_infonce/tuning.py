"""Choosing tau per kernel without the test split: a held-out part of eval_train scores the runs.

The mini table's tau per row comes from a sweep (seed 0) scored here; the report seeds and the
test split never choose a hyper-parameter.
"""
from __future__ import annotations

import torch


def validation_splits(splits: dict, holdout: int, seed: int = 0) -> dict:
    """The splits of a tuning run: 'train' unchanged, 'eval_train' minus `holdout` images (fit of
    the probe / kNN) and those `holdout` images as 'test' (the score). A fixed permutation of
    eval_train by `seed`, so every kernel and tau is scored on the same images."""
    images, labels = splits["eval_train"]
    if not 0 < holdout < len(images):
        raise ValueError(f"holdout must lie in (0, {len(images)}) (the eval_train size), got {holdout}")
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    fit, held = order[holdout:], order[:holdout]
    return {"train": splits["train"], "eval_train": (images[fit], labels[fit]), "test": (images[held], labels[held])}


def best_temperature(scores: dict[float, float]) -> float:
    """The tau of the highest validation score ({tau: score}); a tie goes to the smaller tau."""
    if not scores:
        raise ValueError("best_temperature needs at least one {tau: score} entry")
    return max(sorted(scores), key=lambda t: scores[t])
