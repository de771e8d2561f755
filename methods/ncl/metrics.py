"""Interpretability metrics of a feature matrix z (N samples × K dimensions)."""
from __future__ import annotations

import torch

ACTIVE = 1e-5


def sparsity(z: torch.Tensor, eps: float = ACTIVE) -> float:
    """Fraction of entries with |z| < eps."""
    return float((z.abs() < eps).float().mean())


def class_consistency(z: torch.Tensor, labels: torch.Tensor, eps: float = ACTIVE) -> float:
    """Mean over active dimensions k (z_ik > eps for some i) of the share of the most frequent
    true class among the samples on which k is active."""
    num_classes = int(labels.max()) + 1
    active = (z > eps).float()                                 # (N, K)
    counts = torch.nn.functional.one_hot(labels, num_classes).float().T @ active   # (C, K)
    total = counts.sum(0)
    used = total > 0
    if not used.any():
        return 0.0
    return float((counts.max(0).values[used] / total[used]).mean())


def orthogonality(z: torch.Tensor) -> float:
    """Mean |C − I| over the correlation matrix C of the dimensions that vary (0 = decorrelated)."""
    z = z[:, z.std(0) > 0].double()
    if z.shape[1] < 2:
        return 0.0
    c = torch.corrcoef(z.T)
    return float((c - torch.eye(len(c), dtype=c.dtype)).abs().mean())


def effective_rank(z: torch.Tensor) -> float:
    """exp of the entropy of the normalised singular values (Roy & Vetterli 2007)."""
    s = torch.linalg.svdvals(z.double())
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def top_dimensions(z: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k dimensions with the largest mean activation."""
    return z.mean(0).topk(min(k, z.shape[1])).indices
