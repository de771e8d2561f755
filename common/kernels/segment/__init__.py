"""Segment sum, mean and softmax over CSR offsets: `segment_sum(..., impl=)` and friends.

offsets (S + 1,) int64 delimit the segments: rows offsets[s] .. offsets[s+1]-1 form segment s.
Sorted group ids become offsets with `offsets_from_ids`.
"""
from __future__ import annotations

import torch

from common.kernels import resolve_impl
from common.kernels.segment import reference


def offsets_from_ids(ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """CSR offsets (num_segments + 1,) of sorted segment ids (T,) (e.g. graph id of each atom)."""
    offsets = ids.new_zeros(num_segments + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.bincount(ids, minlength=num_segments), 0)
    return offsets


def _check(name: str, rows: torch.Tensor, offsets: torch.Tensor, index, weight) -> None:
    if offsets.dtype != torch.long or offsets.dim() != 1 or len(offsets) < 1:
        raise ValueError(f"offsets must be a 1-D int64 tensor of S + 1 entries, got {offsets.dtype} {tuple(offsets.shape)}")
    if rows.dim() < 1:
        raise ValueError(f"{name} must have a leading row dimension, got a scalar")
    if index is not None and (index.dtype != torch.long or index.dim() != 1):
        raise ValueError(f"index must be a 1-D int64 tensor, got {index.dtype} {tuple(index.shape)}")
    T = len(index) if index is not None else rows.shape[0]
    if weight is not None and weight.shape != (T,):
        raise ValueError(f"weight must be ({T},), one per row, got {tuple(weight.shape)}")
    if offsets.device.type == "cpu" and int(offsets[-1]) != T:     # on CUDA this would cost a sync
        raise ValueError(f"offsets[-1] must equal the number of rows {T}, got {int(offsets[-1])}")


def _kernel(impl: str, device):
    if resolve_impl(impl, device) == "triton":
        from common.kernels.segment import triton as kernel

        return kernel
    return None


def segment_sum(src: torch.Tensor, offsets: torch.Tensor, index: torch.Tensor | None = None,
                weight: torch.Tensor | None = None, *, impl: str = "reference") -> torch.Tensor:
    """out[s] = Σ_{offsets[s] <= t < offsets[s+1]} weight[t] · src[index[t]]  → (S, ...).

    src (N, ...): rows, gathered by index (T,) when given (else T = N); weight (T,) or None.
    With index and weight this is the CSR sparse-dense product A @ src (crow = offsets,
    col = index, values = weight)."""
    _check("src", src, offsets, index, weight)
    kernel = _kernel(impl, src.device)
    if kernel is not None:
        return kernel.segment_sum(src, offsets, index, weight)
    return reference.segment_sum(src, offsets, index, weight)


def segment_mean(src: torch.Tensor, offsets: torch.Tensor, index: torch.Tensor | None = None,
                 weight: torch.Tensor | None = None, *, impl: str = "reference") -> torch.Tensor:
    """segment_sum / segment length (empty segments give 0)  → (S, ...)."""
    _check("src", src, offsets, index, weight)
    kernel = _kernel(impl, src.device)
    if kernel is not None:
        return kernel.segment_sum(src, offsets, index, weight, mean=True)
    return reference.segment_mean(src, offsets, index, weight)


def segment_softmax(scores: torch.Tensor, offsets: torch.Tensor, *, impl: str = "reference") -> torch.Tensor:
    """Softmax of scores (T, ...) over the rows of each segment, separately per column  → (T, ...)."""
    _check("scores", scores, offsets, None, None)
    kernel = _kernel(impl, scores.device)
    if kernel is not None:
        return kernel.segment_softmax(scores, offsets)
    return reference.segment_softmax(scores, offsets)


__all__ = ["offsets_from_ids", "segment_mean", "segment_softmax", "segment_sum"]
