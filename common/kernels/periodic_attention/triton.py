"""Fused periodic attention: one Triton program per (query atom, head) streams over that
atom's images with an online softmax (FlashAttention's recurrence), so neither the (E, H)
scores nor the (E, H, d) products are ever written: memory O(atoms · H · (d + R)).

The radial basis b(r) is recomputed from r² in every pass; the kernel returns
yv = Σ p v_j and yb = Σ p b(r), and the caller projects yb with W_E (a tiny einsum that
autograd differentiates). The backward recomputes p from the saved log-sum-exp in two
passes: by query (dq, dσ⁻²) and by key atom (dk, dv), each edge visited once per pass, no
atomics (deterministic).
"""
from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from common.kernels.triton_common import ADD, MAX, check_dtype, csr, next_pow2, same_device

BLOCK_E = 32      # images per step of a program's loop


@triton.jit
def _forward_kernel(q_ptr, k_ptr, v_ptr, isig_ptr, dst_ptr, r2_ptr, order_ptr, offsets_ptr,
                    yv_ptr, yb_ptr, lse_ptr, H, DK, R, scale, step, inv_two_width2,
                    BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr, HAS_RBF: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < DK
    q_i = tl.load(q_ptr + (i * H + h) * DK + d, mask=dmask, other=0.0).to(tl.float32)
    s_i = tl.load(isig_ptr + i * H + h).to(tl.float32)
    start = tl.load(offsets_ptr + i)
    end = tl.load(offsets_ptr + i + 1)
    m_i = tl.full([1], float("-inf"), tl.float32)
    l_i = tl.full([1], 0.0, tl.float32)
    acc_v = tl.full([BLOCK_D], 0.0, tl.float32)
    acc_b = tl.full([BLOCK_R], 0.0, tl.float32)
    rcols = tl.arange(0, BLOCK_R)
    centres = (rcols + 1).to(tl.float32) * step    # b_r(x) = exp(-(x - centre_r)² / 2 width²)
    for t0 in range(start, end, BLOCK_E):
        t = t0 + tl.arange(0, BLOCK_E)
        emask = t < end
        e = tl.load(order_ptr + t, mask=emask, other=0)
        j = tl.load(dst_ptr + e, mask=emask, other=0)
        rr = tl.load(r2_ptr + e, mask=emask, other=0.0).to(tl.float32)
        rows = (j * H + h) * DK
        m2 = emask[:, None] & dmask[None, :]
        k_j = tl.load(k_ptr + rows[:, None] + d[None, :], mask=m2, other=0.0).to(tl.float32)
        s = tl.reduce(k_j * q_i[None, :], 1, ADD) * scale - 0.5 * rr * s_i
        s = tl.where(emask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.reduce(s, 0, MAX))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        l_i = l_i * alpha + tl.reduce(p, 0, ADD)
        v_j = tl.load(v_ptr + rows[:, None] + d[None, :], mask=m2, other=0.0).to(tl.float32)
        acc_v = acc_v * alpha + tl.reduce(p[:, None] * v_j, 0, ADD)
        if HAS_RBF:
            diff = tl.sqrt(rr)[:, None] - centres[None, :]
            basis = tl.where(rcols[None, :] < R, tl.exp(-diff * diff * inv_two_width2), 0.0)
            acc_b = acc_b * alpha + tl.reduce(p[:, None] * basis, 0, ADD)
        m_i = m_new
    l_safe = tl.where(l_i > 0, l_i, 1.0)          # an atom without images gets y = 0
    tl.store(yv_ptr + (i * H + h) * DK + d, acc_v / l_safe, mask=dmask)
    if HAS_RBF:
        tl.store(yb_ptr + (i * H + h) * R + rcols, acc_b / l_safe, mask=rcols < R)
    tl.store(lse_ptr + i * H + h + tl.arange(0, 1), m_i + tl.log(l_safe))


@triton.jit
def _backward_query_kernel(q_ptr, k_ptr, v_ptr, isig_ptr, dst_ptr, r2_ptr, order_ptr, offsets_ptr,
                           lse_ptr, delta_ptr, gyv_ptr, gyb_ptr, dq_ptr, disig_ptr,
                           H, DK, R, scale, step, inv_two_width2,
                           BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                           HAS_RBF: tl.constexpr):
    """dq_i and dσ⁻²_i: one program per (query atom, head), over the query's images."""
    i = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < DK
    rcols = tl.arange(0, BLOCK_R)
    centres = (rcols + 1).to(tl.float32) * step
    q_i = tl.load(q_ptr + (i * H + h) * DK + d, mask=dmask, other=0.0).to(tl.float32)
    gyv = tl.load(gyv_ptr + (i * H + h) * DK + d, mask=dmask, other=0.0).to(tl.float32)
    gyb = tl.load(gyb_ptr + (i * H + h) * R + rcols, mask=rcols < R, other=0.0).to(tl.float32)
    s_i = tl.load(isig_ptr + i * H + h).to(tl.float32)
    lse = tl.load(lse_ptr + i * H + h)
    delta = tl.load(delta_ptr + i * H + h)
    start = tl.load(offsets_ptr + i)
    end = tl.load(offsets_ptr + i + 1)
    dq = tl.full([BLOCK_D], 0.0, tl.float32)
    dsig = tl.full([1], 0.0, tl.float32)
    for t0 in range(start, end, BLOCK_E):
        t = t0 + tl.arange(0, BLOCK_E)
        emask = t < end
        e = tl.load(order_ptr + t, mask=emask, other=0)
        j = tl.load(dst_ptr + e, mask=emask, other=0)
        rr = tl.load(r2_ptr + e, mask=emask, other=0.0).to(tl.float32)
        rows = (j * H + h) * DK
        m2 = emask[:, None] & dmask[None, :]
        k_j = tl.load(k_ptr + rows[:, None] + d[None, :], mask=m2, other=0.0).to(tl.float32)
        v_j = tl.load(v_ptr + rows[:, None] + d[None, :], mask=m2, other=0.0).to(tl.float32)
        s = tl.reduce(k_j * q_i[None, :], 1, ADD) * scale - 0.5 * rr * s_i
        p = tl.where(emask, tl.exp(s - lse), 0.0)
        dp = tl.reduce(v_j * gyv[None, :], 1, ADD)
        if HAS_RBF:
            diff = tl.sqrt(rr)[:, None] - centres[None, :]
            basis = tl.where(rcols[None, :] < R, tl.exp(-diff * diff * inv_two_width2), 0.0)
            dp += tl.reduce(basis * gyb[None, :], 1, ADD)
        ds = p * (dp - delta)
        dq += tl.reduce(ds[:, None] * k_j, 0, ADD)
        dsig += tl.reduce(ds * rr, 0, ADD)
    tl.store(dq_ptr + (i * H + h) * DK + d, dq * scale, mask=dmask)
    tl.store(disig_ptr + i * H + h + tl.arange(0, 1), -0.5 * dsig)


@triton.jit
def _backward_key_kernel(q_ptr, k_ptr, v_ptr, isig_ptr, src_ptr, r2_ptr, order_ptr, offsets_ptr,
                         lse_ptr, delta_ptr, gyv_ptr, gyb_ptr, dk_ptr, dv_ptr,
                         H, DK, R, scale, step, inv_two_width2,
                         BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                         HAS_RBF: tl.constexpr):
    """dk_j and dv_j: one program per (key atom, head), over the images of j (edges by dst)."""
    j = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < DK
    rcols = tl.arange(0, BLOCK_R)
    centres = (rcols + 1).to(tl.float32) * step
    k_j = tl.load(k_ptr + (j * H + h) * DK + d, mask=dmask, other=0.0).to(tl.float32)
    v_j = tl.load(v_ptr + (j * H + h) * DK + d, mask=dmask, other=0.0).to(tl.float32)
    start = tl.load(offsets_ptr + j)
    end = tl.load(offsets_ptr + j + 1)
    dk = tl.full([BLOCK_D], 0.0, tl.float32)
    dv = tl.full([BLOCK_D], 0.0, tl.float32)
    for t0 in range(start, end, BLOCK_E):
        t = t0 + tl.arange(0, BLOCK_E)
        emask = t < end
        e = tl.load(order_ptr + t, mask=emask, other=0)
        i = tl.load(src_ptr + e, mask=emask, other=0)
        rr = tl.load(r2_ptr + e, mask=emask, other=0.0).to(tl.float32)
        s_i = tl.load(isig_ptr + i * H + h, mask=emask, other=0.0).to(tl.float32)
        lse = tl.load(lse_ptr + i * H + h, mask=emask, other=0.0)
        delta = tl.load(delta_ptr + i * H + h, mask=emask, other=0.0)
        rows = (i * H + h) * DK
        m2 = emask[:, None] & dmask[None, :]
        q_i = tl.load(q_ptr + rows[:, None] + d[None, :], mask=m2, other=0.0).to(tl.float32)
        gyv = tl.load(gyv_ptr + rows[:, None] + d[None, :], mask=m2, other=0.0).to(tl.float32)
        s = tl.reduce(q_i * k_j[None, :], 1, ADD) * scale - 0.5 * rr * s_i
        p = tl.where(emask, tl.exp(s - lse), 0.0)
        dp = tl.reduce(gyv * v_j[None, :], 1, ADD)
        if HAS_RBF:
            gyb = tl.load(gyb_ptr + ((i * H + h) * R)[:, None] + rcols[None, :],
                          mask=emask[:, None] & (rcols[None, :] < R), other=0.0).to(tl.float32)
            diff = tl.sqrt(rr)[:, None] - centres[None, :]
            basis = tl.where(rcols[None, :] < R, tl.exp(-diff * diff * inv_two_width2), 0.0)
            dp += tl.reduce(basis * gyb, 1, ADD)
        ds = p * (dp - delta)
        dk += tl.reduce(ds[:, None] * q_i, 0, ADD)
        dv += tl.reduce(p[:, None] * gyv, 0, ADD)
    tl.store(dk_ptr + (j * H + h) * DK + d, dk * scale, mask=dmask)
    tl.store(dv_ptr + (j * H + h) * DK + d, dv, mask=dmask)


def _basis_constants(n_rbf: int, r_max: float) -> tuple[float, float]:
    """(centre spacing, 1 / (2 width²)) of the method's basis (reference.rbf): centres
    (r + 1)·step for r = 0..n-1, step = width = r_max / n, as the official code."""
    if n_rbf == 0:
        return 1.0, 1.0
    step = r_max / n_rbf
    return step, 1.0 / (2 * step * step)


class PeriodicAttentionFunction(torch.autograd.Function):
    """(q, k, v, inv_sigma2; edges) -> (yv (A, H, d), yb (A, H, R)); yb is empty when n_rbf = 0."""

    @staticmethod
    def forward(ctx, q, k, v, inv_sigma2, src, dst, r2, n_rbf: int, r_max: float):
        A, H, DK = q.shape
        q, k, v, inv_sigma2, r2 = (t.contiguous() for t in (q, k, v, inv_sigma2, r2))
        order_q, offsets_q = csr(src, A)
        # the reference's dtype promotion (e.g. bf16 q, k, v with fp32 distances under autocast)
        out_dtype = functools.reduce(torch.promote_types, [t.dtype for t in (q, k, v, inv_sigma2, r2)])
        yv = q.new_empty((A, H, DK), dtype=out_dtype)
        yb = q.new_empty((A, H, n_rbf), dtype=out_dtype)
        lse = torch.empty((A, H), device=q.device, dtype=torch.float32)
        step, inv_two_width2 = _basis_constants(n_rbf, r_max)
        consts = dict(BLOCK_E=BLOCK_E, BLOCK_D=next_pow2(DK), BLOCK_R=next_pow2(n_rbf, 2), HAS_RBF=n_rbf > 0)
        if A:
            _forward_kernel[(A, H)](q, k, v, inv_sigma2, dst, r2, order_q, offsets_q, yv, yb, lse,
                                    H, DK, n_rbf, 1 / math.sqrt(DK), step, inv_two_width2, **consts)
        ctx.save_for_backward(q, k, v, inv_sigma2, src, dst, r2, order_q, offsets_q, yv, yb, lse)
        ctx.args = (n_rbf, step, inv_two_width2, consts)
        return yv, yb

    @staticmethod
    def backward(ctx, gyv, gyb):
        q, k, v, inv_sigma2, src, dst, r2, order_q, offsets_q, yv, yb, lse = ctx.saved_tensors
        n_rbf, step, inv_two_width2, consts = ctx.args
        A, H, DK = q.shape
        gyv = torch.zeros_like(yv) if gyv is None else gyv.contiguous()
        gyb = torch.zeros_like(yb) if gyb is None else gyb.contiguous()
        # δ_i = Σ_e p_e dp_e = gy_i · y_i (FlashAttention's D), both parts of the value
        delta = (gyv.float() * yv.float()).sum(-1) + (gyb.float() * yb.float()).sum(-1)
        order_k, offsets_k = csr(dst, A)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        disig = torch.empty_like(inv_sigma2)
        args = (H, DK, n_rbf, 1 / math.sqrt(DK), step, inv_two_width2)
        if A:
            _backward_query_kernel[(A, H)](q, k, v, inv_sigma2, dst, r2, order_q, offsets_q, lse, delta,
                                           gyv, gyb, dq, disig, *args, **consts)
            _backward_key_kernel[(A, H)](q, k, v, inv_sigma2, src, r2, order_k, offsets_k, lse, delta,
                                         gyv, gyb, dk, dv, *args, **consts)
        return dq, dk, dv, disig, None, None, None, None, None


@torch.compiler.disable          # a graph break under torch.compile: the op is one fused kernel already
def periodic_attention(q, k, v, inv_sigma2, src, dst, r2, W_E=None, *, r_max: float = 14.0):
    for name, t in (("q", q), ("k", k), ("v", v), ("inv_sigma2", inv_sigma2), ("r2", r2)):
        check_dtype(name, t)
    same_device(q.device, k=k, v=v, inv_sigma2=inv_sigma2, src=src, dst=dst, r2=r2)
    src, dst = src.contiguous(), dst.contiguous()
    n_rbf = 0 if W_E is None else W_E.shape[1]
    yv, yb = PeriodicAttentionFunction.apply(q, k, v, inv_sigma2, src, dst, r2, n_rbf, float(r_max))
    if W_E is None:
        return yv
    return yv + torch.einsum("ahr,hrd->ahd", yb, W_E)
