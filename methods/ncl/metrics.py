"""Interpretability metrics of a feature matrix z (N samples x K dimensions).

The official code (PKU-ML/non_neg, solo/methods/simclr.py) logs these on the L2-normalised
features F.normalize(σ₊(z)); `feature_metrics` does the same, so the numbers compare with the
paper. Where our earlier definitions differ they stay beside the official ones, named `*_pos`
and `*_corr` (see README, Deviations).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _used(z: torch.Tensor) -> torch.Tensor:
    """The columns that are not zero on every sample (the official `features.abs().sum(0) > 0`)."""
    return z[:, z.abs().sum(0) > 0]


def sparsity(z: torch.Tensor, eps: float) -> float:
    """Share of entries with |z| <= eps (official: 1 - mean(|z| > eps))."""
    return float((z.abs() <= eps).float().mean())


def class_consistency(z: torch.Tensor, labels: torch.Tensor, eps: float) -> float:
    """Official `semantic_consistency`: over the used dimensions k, the share of the most
    frequent true class among the samples with |z_ik| > eps (rows L2-normalised first), averaged;
    a dimension active on no sample is skipped. For dense CL features every sample is active, so
    this is the largest class share of the data (0.1 on a balanced 10-class test set)."""
    z = F.normalize(_used(z), dim=1)
    active = (z.abs() > eps).float()                                               # (N, K)
    counts = F.one_hot(labels, int(labels.max()) + 1).float().T @ active           # (C, K)
    total = counts.sum(0)
    keep = total > 0
    return float((counts.max(0).values[keep] / total[keep]).mean()) if keep.any() else 0.0


def class_consistency_pos(z: torch.Tensor, labels: torch.Tensor, eps: float) -> float:
    """Ours, beside the official one: as `class_consistency` but a sample counts as active only
    when z_ik > eps (positive), which for CL reads its dimensions as 'on' where they are positive."""
    active = (z > eps).float()
    counts = F.one_hot(labels, int(labels.max()) + 1).float().T @ active
    total = counts.sum(0)
    keep = total > 0
    return float((counts.max(0).values[keep] / total[keep]).mean()) if keep.any() else 0.0


def orthogonality(z: torch.Tensor) -> float:
    """Official: mean |C - I| over the K x K cosine matrix C of the column-normalised used
    dimensions (0 = orthogonal dimensions). Not centred: non-negative columns have C >= 0."""
    z = F.normalize(_used(z).double(), dim=0)
    c = z.T @ z
    return float((c - torch.eye(len(c), dtype=c.dtype)).abs().mean())


def orthogonality_corr(z: torch.Tensor) -> float:
    """Ours, beside the official one: mean |R - I| of the Pearson correlation matrix R of the
    dimensions that vary (centred, so a shared mean does not count as overlap)."""
    z = z[:, z.std(0) > 0].double()
    if z.shape[1] < 2:
        return 0.0
    r = torch.corrcoef(z.T)
    return float((r - torch.eye(len(r), dtype=r.dtype)).abs().mean())


def effective_rank(z: torch.Tensor) -> float:
    """Official `erank`: the entropy −Σ p log(p + 1e-6) (nats) of the singular values normalised
    to sum 1. exp of it is Roy & Vetterli's (2007) effective rank, a number of dimensions."""
    s = torch.linalg.svdvals(z.double())
    p = s / s.sum()
    return float(-(p * torch.log(p + 1e-6)).sum())


def top_dimensions(z: torch.Tensor, k: int) -> torch.Tensor:
    """Official ranking for feature selection (solo/methods/linear.py): the k dimensions with the
    largest Σ_i normalize(relu(z))_ik."""
    score = F.normalize(F.relu(z), dim=1).sum(0)
    return score.argsort(descending=True, stable=True)[:min(k, z.shape[1])]


def infonce_mi(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> float:
    """InfoNCE lower bound (Oord et al. 2018) on the information the features carry about the
    image: log N − L, L the symmetric cross-view InfoNCE with critic cos(z1_a, z2_b) / τ over N
    images (z1, z2: (N, K), two augmentations of the same images)."""
    logits = F.normalize(z1.double(), dim=1) @ F.normalize(z2.double(), dim=1).T / temperature
    target = torch.arange(len(z1))
    loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
    return math.log(len(z1)) - float(loss)


def conditional_mi(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """I(x; z_i | z_≠i) = I(x; z) − I(x; z_≠i) for every dimension i (Do & Tran 2020, chain rule),
    each term the InfoNCE estimate of `infonce_mi`. Vectorised: dropping column i changes the
    critic's Gram matrix by one outer product and each row norm by one entry. Returns (K,)."""
    z1, z2 = z1.double(), z2.double()
    n, k = z1.shape
    gram = z1 @ z2.T                                                       # (N, N)
    sq1, sq2 = (z1 ** 2).sum(1), (z2 ** 2).sum(1)                          # (N,)
    target = torch.arange(n)
    full = infonce_mi(z1, z2, temperature)
    out = torch.empty(k, dtype=torch.float64)
    for i in range(k):
        n1 = (sq1 - z1[:, i] ** 2).clamp_min(1e-24).sqrt()
        n2 = (sq2 - z2[:, i] ** 2).clamp_min(1e-24).sqrt()
        logits = (gram - torch.outer(z1[:, i], z2[:, i])) / torch.outer(n1, n2) / temperature
        loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
        out[i] = full - (math.log(n) - float(loss))
    return out


def sepin_at_k(z1: torch.Tensor, z2: torch.Tensor, ks, temperature: float) -> dict[int, float]:
    """SEPIN@k (Do & Tran 2020), the NCL paper's disentanglement measure: the mean of the k
    largest I(x; z_i | z_≠i), in nats. High = the top dimensions each carry information that the
    others do not (disentangled)."""
    bad = [k for k in ks if not 1 <= k <= z1.shape[1]]
    if bad:
        raise ValueError(f"SEPIN@k needs 1 <= k <= {z1.shape[1]} (the feature dimensions), got {bad}")
    cmi = conditional_mi(z1, z2, temperature).sort(descending=True).values
    return {k: float(cmi[:k].mean()) for k in ks}
