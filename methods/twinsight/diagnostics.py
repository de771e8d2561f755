"""Collapse diagnostics of an evaluated model (README, Cold read): how much of the evaluation set
falls in the most predicted class, and how spread the supervised twin's features are (mean
off-diagonal cosine, effective rank). A model stuck at one-class prediction shows top_share 100,
feat_cos near 1 and feat_rank near 1, whatever its accuracy on an unbalanced set."""
from __future__ import annotations

import torch


def pred_histogram(pred: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Share (%) of the predictions in each class, (num_classes,)."""
    if pred.ndim != 1 or len(pred) == 0:
        raise ValueError(f"pred must be a non-empty vector of class indices, got shape {tuple(pred.shape)}")
    if int(pred.min()) < 0 or int(pred.max()) >= num_classes:
        raise ValueError(f"pred holds a class outside [0, {num_classes})")
    return 100.0 * torch.bincount(pred, minlength=num_classes).double() / len(pred)


def mean_cosine(feat: torch.Tensor) -> float:
    """Mean cosine over the pairs i != j of the rows of `feat` (B, d), B >= 2; an all-zero row
    counts as cosine 0 with every other row."""
    if feat.ndim != 2 or feat.shape[0] < 2:
        raise ValueError(f"feat must be a (B >= 2, d) matrix, got {tuple(feat.shape)}")
    f = feat.double()
    n = f.norm(dim=1, keepdim=True)
    u = torch.where(n > 0, f / n.clamp_min(1e-300), torch.zeros_like(f))
    g = u @ u.T
    b = f.shape[0]
    return float((g.sum() - g.diagonal().sum()) / (b * (b - 1)))


def effective_rank(feat: torch.Tensor) -> float:
    """exp of the entropy of the normalised singular values of the centred features (Roy &
    Vetterli 2007): 1 for features on one line, d for isotropic ones; 0 for constant features."""
    if feat.ndim != 2 or feat.shape[0] < 2:
        raise ValueError(f"feat must be a (B >= 2, d) matrix, got {tuple(feat.shape)}")
    f = feat.double()
    sv = torch.linalg.svdvals(f - f.mean(0, keepdim=True))
    if float(sv.sum()) <= 0:
        return 0.0
    p = sv / sv.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))
