"""Segment reductions over CSR offsets, in plain PyTorch: the spec.

Rows t of a (T, ...) tensor belong to segment s when offsets[s] <= t < offsets[s + 1]
(offsets: (S + 1,) int64, non-decreasing, offsets[0] = 0, offsets[S] = T). With `index`,
row t is src[index[t]] (a gather: CSR sparse-dense products, message passing); with
`weight`, row t is scaled by weight[t] (the non-zero values of a sparse matrix).
"""
from __future__ import annotations

import torch


def segment_ids(offsets: torch.Tensor) -> torch.Tensor:
    """(T,) segment of every row."""
    counts = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(len(counts), device=offsets.device), counts)


def _rows(src, index, weight):
    rows = src if index is None else src[index]
    if weight is not None:
        rows = rows * weight.view(-1, *[1] * (rows.dim() - 1))
    return rows


def segment_sum(src, offsets, index=None, weight=None):
    """out[s] = Σ_{offsets[s] <= t < offsets[s+1]} weight[t] · src[index[t]]: (S, ...)."""
    rows = _rows(src, index, weight)                                  # (T, ...)
    S = len(offsets) - 1
    return rows.new_zeros((S, *rows.shape[1:])).index_add(0, segment_ids(offsets), rows)


def segment_mean(src, offsets, index=None, weight=None):
    """segment_sum / segment length; an empty segment gives 0."""
    counts = (offsets[1:] - offsets[:-1]).clamp_min(1)
    out = segment_sum(src, offsets, index, weight)
    return out / counts.view(-1, *[1] * (out.dim() - 1)).to(out.dtype)


def segment_softmax(scores, offsets):
    """Softmax of scores (T, ...) over the rows of each segment, per trailing column."""
    seg = segment_ids(offsets)
    S = len(offsets) - 1
    idx = seg.view(-1, *[1] * (scores.dim() - 1)).expand_as(scores)
    top = scores.new_full((S, *scores.shape[1:]), float("-inf")).scatter_reduce(0, idx, scores, "amax")
    ex = (scores - top[seg]).exp()
    return ex / ex.new_zeros((S, *scores.shape[1:])).index_add(0, seg, ex)[seg]
