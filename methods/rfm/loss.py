"""The Riemannian flow matching objective (RFM eq. 5)."""
from __future__ import annotations

import torch

from methods.rfm.path import conditional_path


def rfm_loss(field, manifold, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """E ‖v_θ(t, x_t) − u_t(x_t | x1)‖²_g / dim, with (x_t, u_t) on the geodesic from x0 to x1."""
    x_t, u_t = conditional_path(manifold, x0, x1, t)
    return (field(t, x_t) - u_t).pow(2).sum(-1).mean() / manifold.dim


def euclidean_fm_loss(field_raw, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The ablation: straight lines in the ambient space, x_t = (1 − t) x0 + t x1, u = x1 − x0,
    regressed by an unconstrained field (projected onto the manifold only when sampling)."""
    tt = t.reshape(-1, 1).to(x0.dtype)
    x_t = (1 - tt) * x0 + tt * x1
    return (field_raw(t, x_t) - (x1 - x0)).pow(2).sum(-1).mean() / x0.shape[-1]
