"""The Soft MoE layer with fused routing: `soft_moe(x, phi, scale, w1, b1, w2, b2, impl=)`."""
from __future__ import annotations

import torch

from common.kernels import resolve_impl
from common.kernels.soft_moe import reference


def soft_moe(x: torch.Tensor, phi: torch.Tensor, scale: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor,
             w2: torch.Tensor, b2: torch.Tensor, *, impl: str = "reference") -> torch.Tensor:
    """Y = softmax_slots(L) · Experts(softmax_tokens(L)ᵀ X), L = normalize(X)·scale·normalize(Φ).

    x (B, m, d); phi (d, s) router; scale () learned temperature; experts w1 (n, d, h),
    b1 (n, h), w2 (n, h, d), b2 (n, d) with s = n·p slots. Returns (B, m, d).
    impl: "reference" | "triton" | "auto" (see common.kernels.resolve_impl).
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, tokens, dim), got shape {tuple(x.shape)}")
    B, M, D = x.shape
    if phi.dim() != 2 or phi.shape[0] != D:
        raise ValueError(f"phi must be (dim, slots) = ({D}, s), got {tuple(phi.shape)}")
    n, S = w1.shape[0], phi.shape[1]
    if S % n:
        raise ValueError(f"slots {S} must be a multiple of the number of experts {n}")
    h = w1.shape[2] if w1.dim() == 3 else -1
    for name, t, want in (("w1", w1, (n, D, h)), ("b1", b1, (n, h)), ("w2", w2, (n, h, D)), ("b2", b2, (n, D))):
        if tuple(t.shape) != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")
    if resolve_impl(impl, x.device) == "triton":
        from common.kernels.soft_moe import triton as kernel

        return kernel.soft_moe(x, phi, scale, w1, b1, w2, b2)
    return reference.soft_moe(x, phi, scale, w1, b1, w2, b2)


__all__ = ["soft_moe"]
