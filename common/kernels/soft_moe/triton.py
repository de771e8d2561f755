"""Soft MoE with fused routing: the dispatch and combine softmaxes never exist as tensors.

The router logits (B, m, s) come from PyTorch (normalize + one matmul, differentiated by
autograd). One Triton kernel, `_softmax_matmul_kernel`, does all four routing products,
each reading the logits once:

    forward   X̃ = softmax_m(L)ᵀ X          online softmax over tokens, writes the column LSE
              Y = softmax_s(L) Ỹ            online softmax over slots, writes the row LSE
    backward  dỸ = Cᵀ dY,  dX += D dX̃      weights exp(L − LSE) from the saved LSEs

and `_router_grad_kernel` writes dL = C∘(dY Ỹᵀ − δ_row) + D∘(X dX̃ᵀ − δ_col) in one pass.
The slots are written and read in expert-major layout (n, B·p, d), so the experts are two
cuBLAS baddbmm calls with no permuted copies (the einsum path copies the (B, n, p, h)
activations several times); their backward is written out here, recomputing GELU.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common.kernels.soft_moe.reference import router_logits
from common.kernels.triton_common import ADD, MAX, check_dtype, dot_dtype, dot_precision, next_pow2, same_device

BLOCK_I, BLOCK_J = 32, 32      # output rows, reduction rows per step (tl.dot needs >= 16)
MAX_BLOCK_D = 512              # whole width per program up to 512: each logit tile read once
GRAD_BLOCK_D = 64


@triton.jit
def _softmax_matmul_kernel(L_ptr, sLb, sLi, sLj, lse_ptr, V_ptr, sVb, sV_hi, sV_lo, PV, O_ptr, sOb, sO_hi, sO_lo, PO,
                           I, J, D, ONLINE: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                           BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_D: tl.constexpr):
    """O[b, i] = Σ_j W[b, i, j] V[b, j] with W = softmax_j(L) (ONLINE; writes lse[b, i]) or
    W = exp(L − lse[b, j]) (lse given). Row r of V or O sits at (r // P)·s_hi + (r % P)·s_lo + b·s_b,
    which covers tokens (P = 1) and expert-major slots (P = slots per expert)."""
    b = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    imask = i < I
    cmask = cols < D
    m_i = tl.full([BLOCK_I], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_I], 0.0, tl.float32)
    acc = tl.full([BLOCK_I, BLOCK_D], 0.0, tl.float32)
    for j0 in range(0, J, BLOCK_J):
        j = j0 + tl.arange(0, BLOCK_J)
        jmask = j < J
        logits = tl.load(L_ptr + b * sLb + i[:, None].to(tl.int64) * sLi + j[None, :].to(tl.int64) * sLj,
                         mask=imask[:, None] & jmask[None, :], other=float("-inf")).to(tl.float32)
        if ONLINE:
            m_new = tl.maximum(m_i, tl.reduce(logits, 1, MAX))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)     # padded rows stay empty
            alpha = tl.exp(m_i - m_safe)
            w = tl.exp(logits - m_safe[:, None])
            l_i = l_i * alpha + tl.reduce(w, 1, ADD)
            acc = acc * alpha[:, None]
            m_i = m_new
        else:
            lse_j = tl.load(lse_ptr + b * J + j, mask=jmask, other=0.0)
            w = tl.exp(logits - lse_j[None, :])
        rows = (j // PV).to(tl.int64) * sV_hi + (j % PV).to(tl.int64) * sV_lo + b * sVb
        v = tl.load(V_ptr + rows[:, None] + cols[None, :], mask=jmask[:, None] & cmask[None, :], other=0.0)
        acc += tl.dot(w.to(DOT), v.to(DOT), input_precision=PREC)
    if ONLINE:
        l_safe = tl.where(l_i > 0, l_i, 1.0)
        acc = acc / l_safe[:, None]
        if tl.program_id(2) == 0:
            tl.store(lse_ptr + b * I + i, m_i + tl.log(l_safe), mask=imask)
    rows = (i // PO).to(tl.int64) * sO_hi + (i % PO).to(tl.int64) * sO_lo + b * sOb
    tl.store(O_ptr + rows[:, None] + cols[None, :], acc, mask=imask[:, None] & cmask[None, :])


@triton.jit
def _router_grad_kernel(L_ptr, row_lse_ptr, col_lse_ptr, row_delta_ptr, col_delta_ptr,
                        dy_ptr, x_ptr, so_ptr, dsi_ptr, dL_ptr, M, S, D, P, s_hi, s_b,
                        DOT: tl.constexpr, PREC: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """dL[b, m, s] = C (dy_m·ỹ_s − δ_row[m]) + D (x_m·dx̃_s − δ_col[s]) for one (BLOCK_M, BLOCK_S) tile."""
    b = tl.program_id(0).to(tl.int64)
    m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    s = tl.program_id(2) * BLOCK_S + tl.arange(0, BLOCK_S)
    mmask = m < M
    smask = s < S
    tok_rows = (b * M + m.to(tl.int64)) * D
    slot_rows = (s // P).to(tl.int64) * s_hi + (s % P).to(tl.int64) * D + b * s_b
    d_comb = tl.full([BLOCK_M, BLOCK_S], 0.0, tl.float32)
    d_disp = tl.full([BLOCK_M, BLOCK_S], 0.0, tl.float32)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        cmask = cols < D
        tmask = mmask[:, None] & cmask[None, :]
        smask2 = smask[:, None] & cmask[None, :]
        dy = tl.load(dy_ptr + tok_rows[:, None] + cols[None, :], mask=tmask, other=0.0)
        x = tl.load(x_ptr + tok_rows[:, None] + cols[None, :], mask=tmask, other=0.0)
        so = tl.load(so_ptr + slot_rows[:, None] + cols[None, :], mask=smask2, other=0.0)
        dsi = tl.load(dsi_ptr + slot_rows[:, None] + cols[None, :], mask=smask2, other=0.0)
        d_comb += tl.dot(dy.to(DOT), tl.trans(so.to(DOT)), input_precision=PREC)
        d_disp += tl.dot(x.to(DOT), tl.trans(dsi.to(DOT)), input_precision=PREC)
    mask = mmask[:, None] & smask[None, :]
    offs = (b * M + m.to(tl.int64))[:, None] * S + s[None, :]
    logits = tl.load(L_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    row_lse = tl.load(row_lse_ptr + b * M + m, mask=mmask, other=0.0)
    col_lse = tl.load(col_lse_ptr + b * S + s, mask=smask, other=0.0)
    row_delta = tl.load(row_delta_ptr + b * M + m, mask=mmask, other=0.0)
    col_delta = tl.load(col_delta_ptr + b * S + s, mask=smask, other=0.0)
    combine = tl.exp(logits - row_lse[:, None])
    dispatch = tl.exp(logits - col_lse[None, :])
    grad = combine * (d_comb - row_delta[:, None]) + dispatch * (d_disp - col_delta[None, :])
    tl.store(dL_ptr + offs, grad, mask=mask)


def _softmax_matmul(logits, logit_strides, I, J, lse, V, v_layout, out, o_layout, online: bool):
    """Launch `_softmax_matmul_kernel`; layouts are (P, s_hi, s_lo, s_b) row addressing."""
    B, D = logits.shape[0], V.shape[-1]
    block_d = min(next_pow2(D, 16), MAX_BLOCK_D)
    grid = (B, triton.cdiv(I, BLOCK_I), triton.cdiv(D, block_d))
    PV, sV_hi, sV_lo, sVb = v_layout
    PO, sO_hi, sO_lo, sOb = o_layout
    _softmax_matmul_kernel[grid](logits, logits.stride(0), *logit_strides, lse, V, sVb, sV_hi, sV_lo, PV,
                                 out, sOb, sO_hi, sO_lo, PO, I, J, D, ONLINE=online,
                                 DOT=dot_dtype(V.dtype), PREC=dot_precision(),
                                 BLOCK_I=BLOCK_I, BLOCK_J=BLOCK_J, BLOCK_D=block_d, num_warps=8 if block_d > 128 else 4)


def _gelu_grad(x: torch.Tensor) -> torch.Tensor:
    """d/dx of the exact (erf) GELU: Φ(x) + x φ(x)."""
    x = x.float()
    return 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


class SoftMoEFunction(torch.autograd.Function):
    """(logits (B, m, s), x (B, m, d), w1, b1, w2, b2) -> y (B, m, d)."""

    @staticmethod
    def forward(ctx, logits, x, w1, b1, w2, b2):
        logits, x = logits.contiguous(), x.contiguous()
        B, M, S = logits.shape
        D, n = x.shape[-1], w1.shape[0]
        P = S // n
        tokens = (1, D, 0, M * D)                      # row r of (B, m, d): r·d + b·m·d
        slots = (P, B * P * D, D, P * D)               # slot r of (n, B·p, d): (r // p)·B·p·d + (r % p)·d + b·p·d
        f32 = dict(device=x.device, dtype=torch.float32)
        col_lse, row_lse = torch.empty((B, S), **f32), torch.empty((B, M), **f32)
        slots_in = x.new_empty((n, B * P, D))
        _softmax_matmul(logits, (1, S), S, M, col_lse, x, tokens, slots_in, slots, online=True)   # Dᵀ X
        pre = torch.baddbmm(b1[:, None, :], slots_in, w1)                                        # (n, B·p, h)
        slots_out = torch.baddbmm(b2[:, None, :], F.gelu(pre), w2)                               # (n, B·p, d)
        y = x.new_empty((B, M, D))
        _softmax_matmul(logits, (S, 1), M, S, row_lse, slots_out, slots, y, tokens, online=True)  # C Ỹ
        ctx.save_for_backward(logits, x, w1, w2, slots_in, pre, slots_out, y, col_lse, row_lse)
        ctx.layouts = (tokens, slots)
        return y

    @staticmethod
    def backward(ctx, dy):
        logits, x, w1, w2, slots_in, pre, slots_out, y, col_lse, row_lse = ctx.saved_tensors
        tokens, slots = ctx.layouts
        dy = dy.contiguous()
        B, M, S = logits.shape
        D = x.shape[-1]
        d_slots_out = torch.empty_like(slots_out)
        _softmax_matmul(logits, (1, S), S, M, row_lse, dy, tokens, d_slots_out, slots, online=False)  # Cᵀ dY
        hidden = F.gelu(pre)
        d_w2 = hidden.transpose(1, 2) @ d_slots_out
        d_pre = ((d_slots_out @ w2.transpose(1, 2)).float() * _gelu_grad(pre)).to(pre.dtype)
        d_w1 = slots_in.transpose(1, 2) @ d_pre
        d_slots_in = d_pre @ w1.transpose(1, 2)                                                      # (n, B·p, d)
        dx = torch.empty_like(x)
        _softmax_matmul(logits, (S, 1), M, S, col_lse, d_slots_in, slots, dx, tokens, online=False)  # D dX̃
        # δ_row[b, m] = Σ_s C dC = dy·y ;  δ_col[b, s] = Σ_m D dD = x̃_s·dx̃_s
        row_delta = (dy.float() * y.float()).sum(-1)
        col_delta = (slots_in.float() * d_slots_in.float()).sum(-1)            # (n, B·p)
        col_delta = col_delta.view(S // slots[0], B, slots[0]).permute(1, 0, 2).reshape(B, S)
        d_logits = torch.empty_like(logits)
        grid = (B, triton.cdiv(M, BLOCK_I), triton.cdiv(S, BLOCK_J))
        _router_grad_kernel[grid](logits, row_lse, col_lse, row_delta, col_delta, dy, x, slots_out, d_slots_in,
                                  d_logits, M, S, D, slots[0], slots[1], slots[3],
                                  DOT=dot_dtype(x.dtype), PREC=dot_precision(),
                                  BLOCK_M=BLOCK_I, BLOCK_S=BLOCK_J, BLOCK_D=GRAD_BLOCK_D)
        return d_logits, dx, d_w1, d_pre.sum(1), d_w2, d_slots_out.sum(1)


@torch.compiler.disable
def soft_moe(x, phi, scale, w1, b1, w2, b2):
    for name, t in (("x", x), ("phi", phi), ("w1", w1)):
        check_dtype(name, t)
    same_device(x.device, phi=phi, w1=w1, b1=b1, w2=w2, b2=b2)
    return SoftMoEFunction.apply(router_logits(x, phi, scale), x, w1, b1, w2, b2)
