"""SampleW's weight gradient with the row gather inside the GEMM: each program of
Σ_t G[rows_t]ᵀ X[rows_t] / q[rows_t] loads the kept rows of G and X straight from the full
tensors, so the (K, out) and (K, in) gathered copies (and the rescaled one) never exist.

Its backward (needed only for double backward and for the parity test) is the same kind
of product: dG[rows_t] = X[rows_t] dWᵀ / q, dX[rows_t] = G[rows_t] dW / q, rows scattered
back (rows are distinct, as nonzero() gives them).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from common.kernels.triton_common import check_dtype, dot_dtype, dot_precision, same_device


def _tiles(dtype: torch.dtype) -> dict:
    """Tile sizes: 128×128 output tiles feed the tensor cores for 16-bit inputs; fp32 (IEEE,
    on the FMA units) uses 64×64 tiles that keep the register use moderate."""
    if dtype == torch.float32:
        return dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=3)


@triton.jit
def _gathered_tn_kernel(g_ptr, x_ptr, rows_ptr, q_ptr, out_ptr, K, K_PER_SPLIT, N_OUT, N_IN,
                        DOT: tl.constexpr, PREC: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[split] (N_OUT, N_IN) = Σ_{t in the split's rows} G[rows_t]ᵀ X[rows_t] / q[rows_t]."""
    o = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    omask = o < N_OUT
    cmask = c < N_IN
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    k_end = tl.minimum(K, (split + 1) * K_PER_SPLIT)
    for k0 in range(split * K_PER_SPLIT, k_end, BLOCK_K):
        t = k0 + tl.arange(0, BLOCK_K)
        tmask = t < k_end
        r = tl.load(rows_ptr + t, mask=tmask, other=0)
        inv_q = 1.0 / tl.load(q_ptr + r, mask=tmask, other=1.0).to(tl.float32)
        g = tl.load(g_ptr + r[:, None] * N_OUT + o[None, :], mask=tmask[:, None] & omask[None, :], other=0.0)
        x = tl.load(x_ptr + r[:, None] * N_IN + c[None, :], mask=tmask[:, None] & cmask[None, :], other=0.0)
        g = (g.to(tl.float32) * inv_q[:, None]).to(DOT)
        acc += tl.dot(tl.trans(g), x.to(DOT), input_precision=PREC)
    out_ptr += split.to(tl.int64) * N_OUT * N_IN
    tl.store(out_ptr + o[:, None].to(tl.int64) * N_IN + c[None, :], acc, mask=omask[:, None] & cmask[None, :])


@triton.jit
def _gathered_rows_kernel(src_ptr, rows_ptr, q_ptr, m_ptr, stride_mk, stride_mn, out_ptr, K, N_SRC, N_OUT,
                          DOT: tl.constexpr, PREC: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[rows_t] = src[rows_t] @ M / q[rows_t] for the kept rows; M (N_SRC, N_OUT) strided."""
    t = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tmask = t < K
    cmask = c < N_OUT
    r = tl.load(rows_ptr + t, mask=tmask, other=0)
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for k0 in range(0, N_SRC, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < N_SRC
        a = tl.load(src_ptr + r[:, None] * N_SRC + k[None, :], mask=tmask[:, None] & kmask[None, :], other=0.0)
        m = tl.load(m_ptr + k[:, None] * stride_mk + c[None, :] * stride_mn, mask=kmask[:, None] & cmask[None, :],
                    other=0.0)
        acc += tl.dot(a.to(DOT), m.to(DOT), input_precision=PREC)
    inv_q = 1.0 / tl.load(q_ptr + r, mask=tmask, other=1.0).to(tl.float32)
    tl.store(out_ptr + r[:, None] * N_OUT + c[None, :], acc * inv_q[:, None], mask=tmask[:, None] & cmask[None, :])


def _splits(programs: int, K: int, device: torch.device) -> int:
    """Split the kept rows over more programs when the output tiles alone cannot fill the GPU
    (ViT-B's 768 x 768 gradient is 36 tiles of 128 x 128 on 132 SMs); each split keeps >= 256 rows.
    The partial sums are added afterwards in a fixed order (deterministic, no atomics)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    return max(1, min(8, -(-2 * sms // programs), K // 256))


def _weight_grad(g, x, rows, q):
    K, (n_out, n_in) = len(rows), (g.shape[1], x.shape[1])
    tiles = _tiles(g.dtype)
    programs = triton.cdiv(n_out, tiles["BLOCK_M"]) * triton.cdiv(n_in, tiles["BLOCK_N"])
    splits = _splits(programs, K, g.device)
    k_per_split = triton.cdiv(triton.cdiv(K, splits), tiles["BLOCK_K"]) * tiles["BLOCK_K"]
    out = g.new_empty((n_out, n_in)) if splits == 1 else g.new_empty((splits, n_out, n_in), dtype=torch.float32)
    grid = (triton.cdiv(n_out, tiles["BLOCK_M"]), triton.cdiv(n_in, tiles["BLOCK_N"]), splits)
    _gathered_tn_kernel[grid](g, x, rows, q, out, K, k_per_split, n_out, n_in,
                              DOT=dot_dtype(g.dtype), PREC=dot_precision(), **tiles)
    return out if splits == 1 else out.sum(0).to(g.dtype)


def _rows_product(src, rows, q, m):
    """zeros except out[rows_t] = src[rows_t] @ m / q[rows_t]; m (src cols, out cols) may be a transposed view."""
    out = torch.zeros((src.shape[0], m.shape[1]), device=src.device, dtype=src.dtype)
    tiles = _tiles(src.dtype)
    if len(rows):
        grid = (triton.cdiv(len(rows), tiles["BLOCK_M"]), triton.cdiv(m.shape[1], tiles["BLOCK_N"]))
        _gathered_rows_kernel[grid](src, rows, q, m, m.stride(0), m.stride(1), out, len(rows), src.shape[1], m.shape[1],
                                    DOT=dot_dtype(src.dtype), PREC=dot_precision(), **tiles)
    return out


class SampledWeightGradFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad_output, input, rows, keep_prob):
        grad_output, input = grad_output.contiguous(), input.contiguous()
        ctx.save_for_backward(grad_output, input, rows, keep_prob)
        return _weight_grad(grad_output, input, rows, keep_prob)

    @staticmethod
    def backward(ctx, d_weight):
        grad_output, input, rows, keep_prob = ctx.saved_tensors
        if len(torch.unique(rows)) != len(rows):
            raise ValueError("rows must be distinct for the backward of sampled_weight_grad (the scatter "
                             "of the kept rows would collide); got repeated row ids")
        d_g = _rows_product(input, rows, keep_prob, d_weight.t()) if ctx.needs_input_grad[0] else None
        d_x = _rows_product(grad_output, rows, keep_prob, d_weight) if ctx.needs_input_grad[1] else None
        return d_g, d_x, None, None


@torch.compiler.disable
def sampled_weight_grad(grad_output, input, rows, keep_prob):
    check_dtype("grad_output", grad_output)
    check_dtype("input", input)
    same_device(grad_output.device, input=input, rows=rows, keep_prob=keep_prob)
    return SampledWeightGradFunction.apply(grad_output, input, rows.contiguous(), keep_prob.contiguous())
