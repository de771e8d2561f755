"""Conditional paths of Riemannian Flow Matching (Chen & Lipman, ICLR 2024)."""
from __future__ import annotations

import torch
from torch.func import jvp


def conditional_path(manifold, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor):
    """Geodesic path x_t = exp_{x0}(t · log_{x0}(x1)) and its velocity u_t = d x_t / dt (by jvp).

    t: (N,) or (N, 1). Along it d(x_t, x1) = (1 − t) d(x0, x1) (tested), and u_t equals the
    premetric field of `premetric_field` with the geodesic distance and κ(t) = 1 − t.
    """
    t = t.reshape(-1, 1).to(x0.dtype)
    v = manifold.log(x0, x1)
    x_t, u_t = jvp(lambda s: manifold.exp(x0, s * v), (t,), (torch.ones_like(t),))
    return x_t, u_t


def premetric_field(manifold, x: torch.Tensor, x1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """u_t(x | x1) = (d log κ/dt) · d(x, x1) · ∇d / ‖∇d‖²_g with κ(t) = 1 − t (RFM eq. 12),
    for the geodesic distance, whose Riemannian gradient is −log_x(x1) / d(x, x1)."""
    t = t.reshape(-1, 1).to(x.dtype)
    dlog_kappa = -1.0 / (1.0 - t)
    log = manifold.log(x, x1)
    d = log.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    grad = -log / d
    return dlog_kappa * d * grad / (grad * grad).sum(-1, keepdim=True)
