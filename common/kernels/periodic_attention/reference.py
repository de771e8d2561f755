"""Crystalformer's infinitely connected attention, in plain PyTorch: the spec.

Atoms i, j of a crystal's unit cell and lattice images n of j are listed as edges
e = (i ← j, n): query atom src[e] = i, key atom dst[e] = j, squared distance r2[e] = r²_ijn.
With σ_i⁻² given per atom and head (inv_sigma2),

    score_e = q_i·k_j / √d − r²_ijn σ_i⁻² / 2            Gaussian distance decay exp(−r²/2σ²)
    p_e     = softmax of score_e over the edges of query i  (one softmax over j and the images n)
    y_i     = Σ_e p_e (v_j + ψ(r_ijn)),   ψ(r) = W_Eᵀ b(r),  b: Gaussian radial basis on (0, r_max]

This is α_ij = log Σ_n exp(−r²/2σ²) and β_ij = Σ_n softmax_n(·) ψ(r) of the paper folded into
one softmax over images (methods/crystalformer/attention.py derives it). The reference builds
the (E, H) and (E, H, d) tensors; the Triton kernel computes the same without them.
"""
from __future__ import annotations

import math

import torch
from einops import einsum


def rbf(r: torch.Tensor, n: int, r_max: float) -> torch.Tensor:
    """n Gaussian radial basis functions, centres k·r_max/n for k = 1..n, width r_max/n: (..., n).
    The official basis (`_get_basis_func` in models/indexed_lattice_multi_head_attention.py,
    models/kernels/real_enc_fwd.cu): no centre at 0 Å, the last one at r_max."""
    delta = r_max / n
    mu = torch.arange(1, n + 1, device=r.device, dtype=r.dtype) * delta
    return torch.exp(-((r.unsqueeze(-1) - mu) ** 2) / (2 * delta**2))


def group_softmax(scores: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Softmax of `scores` (E, H) within each group of rows (`group`: (E,) ids)."""
    H = scores.shape[1]
    idx = group[:, None].expand(-1, H)
    top = scores.new_full((n_groups, H), float("-inf")).scatter_reduce(0, idx, scores, "amax")
    ex = (scores - top[group]).exp()
    return ex / ex.new_zeros((n_groups, H)).index_add(0, group, ex)[group]


def periodic_attention(q, k, v, inv_sigma2, src, dst, r2, W_E=None, *, r_max: float = 14.0):
    """q, k, v (A, H, d) per atom and head; inv_sigma2 (A, H); edges src, dst (E,) int64 and
    r2 (E,); W_E (H, R, d) the value position encoding (None: no ψ). Returns y (A, H, d)."""
    A, H, dk = q.shape
    score = (q[src] * k[dst]).sum(-1) / math.sqrt(dk) - 0.5 * r2[:, None] * inv_sigma2[src]   # (E, H)
    p = group_softmax(score, src, A)                                                            # (E, H)
    values = p[..., None] * v[dst]                                                             # (E, H, d)
    y = values.new_zeros(A, H, dk).index_add(0, src, values)                                   # (A, H, d)
    if W_E is not None:
        weighted = p[..., None] * rbf(r2.sqrt(), W_E.shape[1], r_max)[:, None]                 # (E, H, R)
        radial = weighted.new_zeros(A, H, W_E.shape[1]).index_add(0, src, weighted)
        y = y + einsum(radial, W_E, "a h r, h r d -> a h d")
    return y
