"""VCAS's sampled linear backward (SampleW): `sampled_weight_grad(G, X, rows, q, impl=)`."""
from __future__ import annotations

import torch

from common.kernels import resolve_impl
from common.kernels.sampled_linear import reference


def sampled_weight_grad(grad_output: torch.Tensor, input: torch.Tensor, rows: torch.Tensor, keep_prob: torch.Tensor,
                        *, impl: str = "reference") -> torch.Tensor:
    """Σ_{t} grad_output[rows_t]ᵀ input[rows_t] / keep_prob[rows_t]  → (out, in): the weight
    gradient of a linear layer from the kept token rows, each rescaled by 1/q (unbiased).

    grad_output (N, out) and input (N, in): the layer's output gradient and input, one row per
    token; rows (K,) int64 distinct kept row ids; keep_prob (N,) the keep probabilities q
    (no gradient). impl: "reference" | "triton" | "auto" (see common.kernels.resolve_impl).
    """
    if grad_output.dim() != 2 or input.dim() != 2 or grad_output.shape[0] != input.shape[0]:
        raise ValueError(f"grad_output (N, out) and input (N, in) must be 2-D with the same rows, "
                         f"got {tuple(grad_output.shape)} and {tuple(input.shape)}")
    if rows.dtype != torch.long or rows.dim() != 1:
        raise ValueError(f"rows must be a 1-D int64 tensor of kept row ids, got {rows.dtype} {tuple(rows.shape)}")
    if keep_prob.shape != (grad_output.shape[0],):
        raise ValueError(f"keep_prob must be ({grad_output.shape[0]},), one per row, got {tuple(keep_prob.shape)}")
    if resolve_impl(impl, grad_output.device) == "triton":
        from common.kernels.sampled_linear import triton as kernel

        return kernel.sampled_weight_grad(grad_output, input, rows, keep_prob)
    return reference.sampled_weight_grad(grad_output, input, rows, keep_prob)


__all__ = ["sampled_weight_grad"]
