"""Segment sum / mean / softmax over CSR offsets in Triton: one program per (segment,
column block) streams the segment's rows once, so each op moves its bytes once (the
bandwidth bound), with the gather by `index` and the `weight` scaling done on load.

Backward: d src of a plain segment is a broadcast (one kernel); d src of a gathered one is
the same segment sum over the transposed CSR (rows grouped by index), built with an argsort
of the (T,) integers: deterministic, no atomics. d weight is a per-row dot product.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from common.kernels.triton_common import ADD, MAX, check_dtype, csr, next_pow2, same_device

MAX_BLOCK_D = 128     # columns per program
TILE = 2048           # elements per loaded tile: rows per step = TILE / columns, 32 .. 256


def _rows_per_step(columns: int) -> int:
    """Narrow rows (a few heads, one feature) take more rows per step, so every load stays a
    few KB: small tiles leave the memory system idle between loop steps."""
    return max(32, min(256, TILE // columns))


@triton.jit
def _sum_kernel(src_ptr, index_ptr, weight_ptr, offsets_ptr, out_ptr, D,
                HAS_INDEX: tl.constexpr, HAS_WEIGHT: tl.constexpr, MEAN: tl.constexpr,
                BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(offsets_ptr + s)
    end = tl.load(offsets_ptr + s + 1)
    acc = tl.full([BLOCK_D], 0.0, tl.float32)
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        tmask = t < end
        if HAS_INDEX:
            rows = tl.load(index_ptr + t, mask=tmask, other=0)
        else:
            rows = t
        x = tl.load(src_ptr + rows[:, None] * D + cols[None, :], mask=tmask[:, None] & cmask[None, :],
                    other=0.0).to(tl.float32)
        if HAS_WEIGHT:
            x = x * tl.load(weight_ptr + t, mask=tmask, other=0.0).to(tl.float32)[:, None]
        acc += tl.reduce(x, 0, ADD)
    if MEAN:
        acc = acc / tl.maximum(end - start, 1).to(tl.float32)
    tl.store(out_ptr + s * D + cols, acc, mask=cmask)


@triton.jit
def _expand_kernel(grad_ptr, weight_ptr, offsets_ptr, out_ptr, D,
                   HAS_WEIGHT: tl.constexpr, MEAN: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[t] = weight[t] · grad[s] (/ length): the backward of a segment sum without index."""
    s = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(offsets_ptr + s)
    end = tl.load(offsets_ptr + s + 1)
    g = tl.load(grad_ptr + s * D + cols, mask=cmask, other=0.0).to(tl.float32)
    if MEAN:
        g = g / tl.maximum(end - start, 1).to(tl.float32)
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        tmask = t < end
        x = tl.full([BLOCK_T, BLOCK_D], 0.0, tl.float32) + g[None, :]
        if HAS_WEIGHT:
            x = x * tl.load(weight_ptr + t, mask=tmask, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptr + t[:, None] * D + cols[None, :], x, mask=tmask[:, None] & cmask[None, :])


@triton.jit
def _row_dot_kernel(grad_ptr, src_ptr, index_ptr, offsets_ptr, out_ptr, D,
                    HAS_INDEX: tl.constexpr, MEAN: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[t] = grad[s] · src[index[t]] (/ length): the weight gradient."""
    s = tl.program_id(0).to(tl.int64)
    start = tl.load(offsets_ptr + s)
    end = tl.load(offsets_ptr + s + 1)
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        tmask = t < end
        if HAS_INDEX:
            rows = tl.load(index_ptr + t, mask=tmask, other=0)
        else:
            rows = t
        acc = tl.full([BLOCK_T], 0.0, tl.float32)
        for d0 in range(0, D, BLOCK_D):
            cols = d0 + tl.arange(0, BLOCK_D)
            cmask = cols < D
            g = tl.load(grad_ptr + s * D + cols, mask=cmask, other=0.0).to(tl.float32)
            x = tl.load(src_ptr + rows[:, None] * D + cols[None, :], mask=tmask[:, None] & cmask[None, :],
                        other=0.0).to(tl.float32)
            acc += tl.reduce(x * g[None, :], 1, ADD)
        if MEAN:
            acc = acc / tl.maximum(end - start, 1).to(tl.float32)
        tl.store(out_ptr + t, acc, mask=tmask)


@triton.jit
def _softmax_kernel(x_ptr, offsets_ptr, out_ptr, H, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cmask = cols < H
    start = tl.load(offsets_ptr + s)
    end = tl.load(offsets_ptr + s + 1)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_H], 0.0, tl.float32)
    for t0 in range(start, end, BLOCK_T):          # pass 1: running max and sum of exp
        t = t0 + tl.arange(0, BLOCK_T)
        mask = (t < end)[:, None] & cmask[None, :]
        x = tl.load(x_ptr + t[:, None] * H + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_i, tl.reduce(x, 0, MAX))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)     # padded columns stay -inf
        l_i = l_i * tl.exp(m_i - m_safe) + tl.reduce(tl.exp(x - m_safe[None, :]), 0, ADD)
        m_i = m_new
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    for t0 in range(start, end, BLOCK_T):          # pass 2: write the probabilities
        t = t0 + tl.arange(0, BLOCK_T)
        mask = (t < end)[:, None] & cmask[None, :]
        x = tl.load(x_ptr + t[:, None] * H + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_ptr + t[:, None] * H + cols[None, :], tl.exp(x - m_safe[None, :]) / l_safe[None, :], mask=mask)


@triton.jit
def _softmax_backward_kernel(p_ptr, grad_ptr, offsets_ptr, out_ptr, H, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """dx = p (dp − Σ_segment p dp)."""
    s = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cmask = cols < H
    start = tl.load(offsets_ptr + s)
    end = tl.load(offsets_ptr + s + 1)
    delta = tl.full([BLOCK_H], 0.0, tl.float32)
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        mask = (t < end)[:, None] & cmask[None, :]
        p = tl.load(p_ptr + t[:, None] * H + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g = tl.load(grad_ptr + t[:, None] * H + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        delta += tl.reduce(p * g, 0, ADD)
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        mask = (t < end)[:, None] & cmask[None, :]
        p = tl.load(p_ptr + t[:, None] * H + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g = tl.load(grad_ptr + t[:, None] * H + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + t[:, None] * H + cols[None, :], p * (g - delta[None, :]), mask=mask)


def _blocks(D: int) -> dict:
    block_d = min(next_pow2(D, 2), MAX_BLOCK_D)
    return dict(BLOCK_T=_rows_per_step(block_d), BLOCK_D=block_d)


ROW_DOT_BLOCKS = dict(BLOCK_T=32, BLOCK_D=64)     # the weight gradient loops over the columns


def _launch_sum(src2, offsets, index, weight, mean: bool) -> torch.Tensor:
    S, D = len(offsets) - 1, src2.shape[1]
    out = src2.new_empty((S, D))
    blocks = _blocks(D)
    if S and D:
        grid = (S, triton.cdiv(D, blocks["BLOCK_D"]))
        _sum_kernel[grid](src2, src2 if index is None else index, src2 if weight is None else weight, offsets, out, D,
                          HAS_INDEX=index is not None, HAS_WEIGHT=weight is not None, MEAN=mean, **blocks)
    return out


class SegmentSumFunction(torch.autograd.Function):
    """(src (N, D), weight (T,) or None; offsets, index or None, mean) -> (S, D)."""

    @staticmethod
    def forward(ctx, src2, weight, offsets, index, mean: bool):
        src2 = src2.contiguous()
        ctx.save_for_backward(src2, weight, offsets, index)
        ctx.mean = mean
        return _launch_sum(src2, offsets, index, weight, mean)

    @staticmethod
    def backward(ctx, grad):
        src2, weight, offsets, index = ctx.saved_tensors
        grad = grad.contiguous()
        S, D = grad.shape
        blocks = _blocks(D)
        d_src = d_weight = None
        if ctx.needs_input_grad[0]:
            if index is None:
                d_src = torch.empty_like(src2)
                if S and D:
                    _expand_kernel[(S, triton.cdiv(D, blocks["BLOCK_D"]))](
                        grad, grad if weight is None else weight, offsets, d_src, D,
                        HAS_WEIGHT=weight is not None, MEAN=ctx.mean, **blocks)
            else:
                # d src[v] = Σ_{t: index[t] = v} weight[t] grad[segment(t)]: a segment sum over
                # the transposed CSR (rows t grouped by index), gathering grad by segment
                counts = offsets[1:] - offsets[:-1]
                seg = torch.repeat_interleave(torch.arange(S, device=grad.device), counts, output_size=len(index))
                order, offsets_t = csr(index, src2.shape[0])
                scale = None if weight is None else weight.float()
                if ctx.mean:
                    inv = 1.0 / counts.clamp_min(1).float()
                    scale = inv[seg] if scale is None else scale * inv[seg]
                d_src = _launch_sum(grad, offsets_t, seg[order], None if scale is None else scale[order],
                                    mean=False).to(src2.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            d_weight = torch.empty_like(weight)
            if S:
                _row_dot_kernel[(S,)](grad, src2, src2 if index is None else index, offsets, d_weight, D,
                                      HAS_INDEX=index is not None, MEAN=ctx.mean, **ROW_DOT_BLOCKS)
        return d_src, d_weight, None, None, None


class SegmentSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, offsets):
        x2 = x2.contiguous()
        S, H = len(offsets) - 1, x2.shape[1]
        out = torch.empty_like(x2)
        block_h = min(next_pow2(H, 2), 64)
        ctx.launch = ((S, triton.cdiv(H, block_h)), dict(BLOCK_T=_rows_per_step(block_h) // 2, BLOCK_H=block_h))
        if S and H:
            grid, blocks = ctx.launch
            _softmax_kernel[grid](x2, offsets, out, H, **blocks)
        ctx.save_for_backward(out, offsets)
        return out

    @staticmethod
    def backward(ctx, grad):
        p, offsets = ctx.saved_tensors
        grad = grad.contiguous()
        dx = torch.empty_like(p)
        grid, blocks = ctx.launch
        if grid[0] and p.shape[1]:
            _softmax_backward_kernel[grid](p, grad, offsets, dx, p.shape[1], **blocks)
        return dx, None


def _flat(src: torch.Tensor) -> torch.Tensor:
    return src.reshape(src.shape[0], -1)


@torch.compiler.disable
def segment_sum(src, offsets, index=None, weight=None, *, mean: bool = False):
    check_dtype("src", src)
    same_device(src.device, offsets=offsets, index=index, weight=weight)
    offsets = offsets.contiguous()
    index = None if index is None else index.contiguous()
    weight = None if weight is None else weight.contiguous()
    out = SegmentSumFunction.apply(_flat(src), weight, offsets, index, mean)
    return out.view(len(offsets) - 1, *src.shape[1:])


@torch.compiler.disable
def segment_softmax(scores, offsets):
    check_dtype("scores", scores)
    same_device(scores.device, offsets=offsets)
    return SegmentSoftmaxFunction.apply(_flat(scores), offsets.contiguous()).view(scores.shape)
