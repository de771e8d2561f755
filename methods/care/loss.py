"""CARE's losses (Gupta et al., ICLR 2024, "Structuring Representation Geometry with
Rotationally Equivariant Contrastive Learning"), as pure functions of embeddings."""
from __future__ import annotations

import torch
from einops import einsum


def equivariance_loss(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """L_equi (CARE eq. 3, the batched estimate of E_a E_{x,x'}[f(ax)ᵀf(ax') − f(a'x)ᵀf(a'x')]²).

    z1, z2: (K, n, d) — K chunks of n images; within chunk k every image of z1 went through
    the same augmentation t1_k and every image of z2 through t2_k. Rows are unit norm.
    Returns the mean over chunks of the mean over ordered pairs i != j of
    ((Z1 Z1ᵀ)_ij − (Z2 Z2ᵀ)_ij)². The diagonal (always 1 − 1 = 0) is excluded.
    """
    k, n, _ = z1.shape
    if n < 2:
        raise ValueError("equivariance_loss needs at least 2 images per chunk")
    gram1 = einsum(z1, z1, "k i d, k j d -> k i j")
    gram2 = einsum(z2, z2, "k i d, k j d -> k i j")
    sq = (gram1 - gram2).pow(2)
    off_diag = ~torch.eye(n, dtype=torch.bool, device=z1.device)
    return sq[:, off_diag].mean()


def care_loss(info_nce_loss: torch.Tensor, equi_loss: torch.Tensor, weight: float) -> torch.Tensor:
    """L_CARE = L_InfoNCE + λ · L_equi (CARE eq. 4)."""
    return info_nce_loss + weight * equi_loss
