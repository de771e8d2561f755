"""The Riemannian flow matching objective (RFM eq. 5) and the Euclidean ablation."""
from __future__ import annotations

import torch

from methods.rfm.path import conditional_path


def rfm_loss_on_path(field, manifold, x_t: torch.Tensor, u_t: torch.Tensor, t: torch.Tensor,
                     dim: int | None = None) -> torch.Tensor:
    """E ‖v_θ(t, x_t) − u_t‖²_g / D over points (x_t (N, ambient), u_t (N, ambient), t (N,)) of
    conditional paths (RFM eq. 5; the metric is the ambient one on the sphere, torus and mesh). As the
    official rfm_loss_fn (manifm/model_pl.py:614-615, `manifold.inner(x_t, diff, diff).mean() /
    self.dim`): the per-point sum of squares, the mean over the batch, divided by the data's ambient
    dimension D (3 on S² and meshes, D on T^D), not the intrinsic one; `dim` replaces D (the ablation
    passes the intrinsic dimension)."""
    dim = manifold.ambient_dim if dim is None else dim
    if dim < 1:
        raise ValueError(f"the loss's dimension must be >= 1, got {dim}")
    return (field(t, x_t) - u_t).pow(2).sum(-1).mean() / dim


def rfm_loss(field, manifold, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor,
             dim: int | None = None) -> torch.Tensor:
    """RFM eq. 5 with (x_t, u_t) on the geodesic from x0 to x1 (simulation-free, section 3.1)."""
    x_t, u_t = conditional_path(manifold, x0, x1, t)
    return rfm_loss_on_path(field, manifold, x_t, u_t, t, dim)


def projected_euclidean_loss(field, manifold, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor,
                             dim: int | None = None) -> torch.Tensor:
    """The ablation: Euclidean flow matching projected onto the manifold. The ambient straight line
    x_t = (1 − t) x0 + t x1 with velocity x1 − x0, projected: the (tangent) field is evaluated at
    projx(x_t) and regressed onto proju(projx(x_t), x1 − x0). This is not the velocity of any path
    between x0 and x1 on the manifold; RFM's geodesic target is."""
    tt = t.reshape(-1, 1).to(x0.dtype)
    x_t = manifold.projx((1 - tt) * x0 + tt * x1)
    return rfm_loss_on_path(field, manifold, x_t, manifold.proju(x_t, x1 - x0), t, dim)
