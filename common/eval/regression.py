"""Regression and density estimation metrics."""
from __future__ import annotations

import torch


def mae(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Mean absolute error."""
    if pred.shape != target.shape:
        raise ValueError(f"prediction shape {tuple(pred.shape)} != target shape {tuple(target.shape)}")
    return float((pred.double() - target.double()).abs().mean())


def mean_nll(log_prob: torch.Tensor) -> float:
    """Mean negative log-likelihood (nats) of held-out points from their log-densities."""
    if not torch.isfinite(log_prob).all():
        raise ValueError("log-densities contain NaN or inf")
    return float(-log_prob.double().mean())
