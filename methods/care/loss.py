"""CARE's losses (Gupta et al., ICLR 2024, "Structuring Representation Geometry with
Rotationally Equivariant Contrastive Learning"), as pure functions of embeddings."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import einsum


def equivariance_loss(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """L_equi (CARE eq. 3) at the official code's scale, on K chunks of the batch.

    z1, z2: (K, n, d) unit-norm rows; within chunk k every image of z1 went through the same
    augmentation t1_k and every image of z2 through t2_k. Per chunk, as the official
    `equivariance_loss` (Sharut/CARE, cifar10_cifar100_stl10/utils.py):
        2 · mean_i Σ_{j≠i} ((Z1 Z1ᵀ)_ij − (Z2 Z2ᵀ)_ij)²,
    then the mean over chunks. The paper writes L_equi as an expectation over pairs,
    E_{x,x'}[f(ax)ᵀf(ax') − f(a'x)ᵀf(a'x')]², i.e. the mean over ordered pairs i≠j; the
    official value is 2(n − 1) times that mean (30× at n = 16). The paper's λ were tuned on
    the official scale, so λ here means what it means there. The diagonal (1 − 1) is left out.
    """
    k, n, _ = z1.shape
    if n < 2:
        raise ValueError(f"equivariance_loss needs at least 2 images per chunk, got {n}")
    gram1 = einsum(z1, z1, "k i d, k j d -> k i j")
    gram2 = einsum(z2, z2, "k i d, k j d -> k i j")
    off_diag = ~torch.eye(n, dtype=torch.bool, device=z1.device)
    sq = (gram1 - gram2).pow(2) * off_diag                   # (K, n, n), zero diagonal
    return 2 * sq.sum(dim=2).mean()                          # Σ_j, mean over i and chunks


def uniformity_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """The non-collapse term of the "equivariance without invariance" variant (the official
    `loss_subtype=uniformity`, the log-denominator of NT-Xent without its positive):
        mean over the 2N anchors i of log Σ_{k ∉ {i, pos(i)}} exp(z_iᵀ z_k / τ).
    z1, z2: (N, d) embeddings of two views (L2-normalised here); no pair is pulled together.
    """
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2]), dim=1)                            # (2N, d)
    sim = z @ z.T / temperature                                             # (2N, 2N)
    idx = torch.arange(2 * n, device=z.device)
    positive = torch.cat([idx[n:], idx[:n]])
    keep = torch.ones_like(sim, dtype=torch.bool)
    keep[idx, idx] = False
    keep[idx, positive] = False
    return torch.logsumexp(sim.masked_fill(~keep, float("-inf")), dim=1).mean()


def care_loss(base_loss: torch.Tensor, equi_loss: torch.Tensor, weight: float) -> torch.Tensor:
    """L_CARE = L_InfoNCE + λ · L_equi (CARE eq. 4); with the uniformity variant, base_loss is
    `uniformity_loss` instead of InfoNCE."""
    return base_loss + weight * equi_loss
