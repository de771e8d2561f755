"""Crystalformer's infinitely connected (periodic) attention: `periodic_attention(..., impl=)`."""
from __future__ import annotations

import torch

from common.kernels import resolve_impl
from common.kernels.periodic_attention import reference


def periodic_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, inv_sigma2: torch.Tensor,
                       src: torch.Tensor, dst: torch.Tensor, r2: torch.Tensor, W_E: torch.Tensor | None = None,
                       *, r_max: float = 14.0, impl: str = "reference") -> torch.Tensor:
    """y_i = Σ_{images e of i} softmax_e(q_i·k_j/√d − r²_e σ_i⁻²/2) (v_j + W_Eᵀ b(r_e)).

    q, k, v: (A, H, d) per atom and head; inv_sigma2: (A, H) σ⁻²; src, dst: (E,) int64 query
    and key atom of each image; r2: (E,) squared distances (geometry: no gradient in the
    Triton implementation); W_E: (H, R, d) value position encoding on R Gaussian basis
    functions (centres k·r_max/R, k = 1..R), or None for none (the "simplified" model). Returns (A, H, d).
    impl: "reference" | "triton" | "auto" (see common.kernels.resolve_impl).
    """
    if q.dim() != 3 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must share one (atoms, heads, dim) shape, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if inv_sigma2.shape != q.shape[:2]:
        raise ValueError(f"inv_sigma2 must be (atoms, heads) = {tuple(q.shape[:2])}, got {tuple(inv_sigma2.shape)}")
    if src.dtype != torch.long or dst.dtype != torch.long or src.shape != dst.shape or src.dim() != 1:
        raise ValueError(f"src and dst must be (E,) int64, got {src.dtype} {tuple(src.shape)} and {dst.dtype} {tuple(dst.shape)}")
    if r2.shape != src.shape:
        raise ValueError(f"r2 must be (E,) = {tuple(src.shape)}, got {tuple(r2.shape)}")
    if W_E is not None and (W_E.dim() != 3 or W_E.shape[0] != q.shape[1] or W_E.shape[2] != q.shape[2] or W_E.shape[1] < 2):
        raise ValueError(f"W_E must be (heads, basis >= 2, dim) = ({q.shape[1]}, R, {q.shape[2]}), got {tuple(W_E.shape)}")
    if resolve_impl(impl, q.device) == "triton":
        from common.kernels.periodic_attention import triton as kernel

        return kernel.periodic_attention(q, k, v, inv_sigma2, src, dst, r2, W_E, r_max=r_max)
    return reference.periodic_attention(q, k, v, inv_sigma2, src, dst, r2, W_E, r_max=r_max)


__all__ = ["periodic_attention"]
