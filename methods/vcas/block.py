"""A timm ViT block whose sampled backward runs on the kept samples only, every op of it.

The generic path (`sampling.SampledBlock` + `SampledLinear`) samples in the backward of the
ordinary autograd graph: the linears gather the kept samples' rows, but the attention product,
the norms and GELU run their backward on the whole batch, dropped rows (zeros) included, and
every linear gathers its own operands and scatters its ∇X back into a zero tensor. At the mini
tier's sizes (d = 64, 16 tokens) those whole-batch ops and copies cost more than the FLOPs the
sampled products save.

`_FusedBlockFn` is one autograd node for the whole block (pre-norm attention + GELU MLP, what
timm's `Block` computes with no layer scale, drop path, q/k norm or dropout). Its forward is the
block's exact forward (same aten ops, nothing extra kept beyond what autograd keeps); its
backward first applies SampleA (`sampling.sample_act`) to the block's output gradient, gathers
the kept samples' rows of every saved activation once, runs the whole hand-written backward
(linears with SampleW, GELU, the CPU flash-attention backward, both LayerNorms) on those rows,
and scatters ∇x once. Nothing is recomputed, so the FLOPs are the generic path's minus the
attention backward of the dropped samples. Used on CPU where `fusable(block)` holds (the CPU
flash-attention kernel); elsewhere, and for other blocks (BERT layers), the generic path.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import sdpa_backward_flop_count

from methods.vcas.sampling import SamplingState, sample_act, weight_grad

_aten = torch.ops.aten


def fusable(block: nn.Module) -> bool:
    """True for a timm ViT `Block` this module computes exactly: LayerNorms, fused attention
    without q/k norm, gate or dropout, a GELU (erf) MLP, no layer scale or drop path."""
    try:
        from timm.models.vision_transformer import Block
    except ImportError:   # pragma: no cover - timm is a dependency
        return False
    if type(block) is not Block:
        return False
    attn, mlp = block.attn, block.mlp
    identity = (block.ls1, block.ls2, block.drop_path1, block.drop_path2, attn.q_norm, attn.k_norm, attn.norm,
                mlp.norm, mlp.drop1, mlp.drop2, attn.proj_drop)
    return (all(isinstance(m, nn.Identity) or (isinstance(m, nn.Dropout) and m.p == 0) for m in identity)
            and _plain_layer_norm(block.norm1) and _plain_layer_norm(block.norm2)
            and getattr(attn, "gate", None) is None and attn.fused_attn and attn.attn_drop.p == 0
            and type(mlp.act) is nn.GELU and mlp.act.approximate == "none")


def _plain_layer_norm(norm: nn.Module) -> bool:
    """torch's LayerNorm, or timm's subclass without its fused 'fast norm' (same F.layer_norm)."""
    from timm.layers.norm import LayerNorm
    return (type(norm) is nn.LayerNorm or (type(norm) is LayerNorm and not getattr(norm, "_fast_norm", False))) \
        and norm.elementwise_affine and len(norm.normalized_shape) == 1


def block_params(block: nn.Module) -> list[torch.Tensor]:
    a, m = block.attn, block.mlp
    return [block.norm1.weight, block.norm1.bias, a.qkv.weight, a.qkv.bias, a.proj.weight, a.proj.bias,
            block.norm2.weight, block.norm2.bias, m.fc1.weight, m.fc1.bias, m.fc2.weight, m.fc2.bias]


class _FusedBlockFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, state, l, block, *params):
        n1w, n1b, wqkv, bqkv, wp, bp, n2w, n2b, w1, b1, w2, b2 = params
        a = block.attn
        b, t, d = x.shape
        n1, mean1, rstd1 = _aten.native_layer_norm(x, [d], n1w, n1b, block.norm1.eps)
        qkv = F.linear(n1, wqkv, bqkv)
        q, k, v = qkv.view(b, t, 3, a.num_heads, a.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        o, lse = _aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, scale=a.scale)
        att = o.transpose(1, 2).reshape(b, t, d)
        x1 = x + F.linear(att, wp, bp)
        n2, mean2, rstd2 = _aten.native_layer_norm(x1, [d], n2w, n2b, block.norm2.eps)
        h = F.linear(n2, w1, b1)
        g = F.gelu(h)
        out = x1 + F.linear(g, w2, b2)
        ctx.state, ctx.l, ctx.block = state, l, block
        ctx.save_for_backward(x, n1, mean1, rstd1, qkv, o, lse, att, x1, n2, mean2, rstd2, h, g, *params)
        return out

    @staticmethod
    def backward(ctx, gy):
        st: SamplingState = ctx.state
        (x, n1, mean1, rstd1, qkv, o, lse, att, x1, n2, mean2, rstd2, h, g,
         n1w, n1b, wqkv, bqkv, wp, bp, n2w, n2b, w1, b1, w2, b2) = ctx.saved_tensors
        a = ctx.block.attn
        js = [lin.index for lin in (a.qkv, a.proj, ctx.block.mlp.fc1, ctx.block.mlp.fc2)]
        n, t, d = x.shape
        gy = sample_act(st, ctx.l, gy)
        kept = st.kept
        if kept is not None:   # every saved activation's kept rows, gathered once
            gy, x, n1, mean1, rstd1, qkv, o, lse, att, x1, n2, mean2, rstd2, h, g = (
                u.index_select(0, kept) for u in (gy, x, n1, mean1, rstd1, qkv, o, lse, att, x1, n2, mean2, rstd2, h, g))
        k = x.shape[0]
        if k == 0:   # nothing kept: every gradient of the block is zero (its FLOPs all skipped)
            st.skipped_flops += _block_backward_flops(ctx.block, n, t)
            return (torch.zeros((n, t, d), dtype=gy.dtype, device=gy.device), None, None, None,
                    *(None if p is None else torch.zeros_like(p)
                      for p in (n1w, n1b, wqkv, bqkv, wp, bp, n2w, n2b, w1, b1, w2, b2)))
        rows, skipped = k * t, 0.0

        def linear_back(gz, inp, w, bias, j):
            nonlocal skipped
            gz2, in2 = gz.reshape(-1, w.shape[0]), inp.reshape(-1, w.shape[1])
            gw, w_rows = weight_grad(st, j, gz2, in2)
            skipped += 2.0 * w.shape[0] * w.shape[1] * (2 * (n - k) * t + rows - w_rows)   # ∇X and ∇W rows
            return (gz2 @ w).view(*gz.shape[:-1], w.shape[1]), gw, None if bias is None else gz2.sum(0)

        gg, gw2, gb2 = linear_back(gy, g, w2, b2, js[3])
        gh = _aten.gelu_backward(gg, h)
        gn2, gw1, gb1 = linear_back(gh, n2, w1, b1, js[2])
        gx1, gn2w, gn2b = _aten.native_layer_norm_backward(gn2, x1, [d], mean2, rstd2, n2w, n2b, [True, True, True])
        gx1 = gx1 + gy
        gatt, gwp, gbp = linear_back(gx1, att, wp, bp, js[1])
        go = gatt.view(k, t, a.num_heads, a.head_dim).transpose(1, 2)
        q, kk, v = qkv.view(k, t, 3, a.num_heads, a.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        gq, gk, gv = _aten._scaled_dot_product_flash_attention_for_cpu_backward(
            go, q, kk, v, o, lse, 0.0, False, scale=a.scale)
        skipped += (n - k) / max(n, 1) * sdpa_backward_flop_count((n, *go.shape[1:]), (n, *q.shape[1:]),
                                                                    (n, *kk.shape[1:]), (n, *v.shape[1:]))
        gqkv = torch.stack((gq, gk, gv), 0).permute(1, 3, 0, 2, 4).reshape(k, t, 3 * d)
        gn1, gwqkv, gbqkv = linear_back(gqkv, n1, wqkv, bqkv, js[0])
        gx, gn1w, gn1b = _aten.native_layer_norm_backward(gn1, x, [d], mean1, rstd1, n1w, n1b, [True, True, True])
        gx = gx + gx1
        if kept is not None:
            gx = gx.new_zeros((n, t, d)).index_copy_(0, kept, gx)
        st.skipped_flops += skipped
        return (gx, None, None, None, gn1w, gn1b, gwqkv, gbqkv, gwp, gbp, gn2w, gn2b, gw1, gb1, gw2, gb2)


def _block_backward_flops(block: nn.Module, n: int, t: int) -> float:
    """Matrix-multiply FLOPs of the block's exact backward for n samples of t tokens."""
    a, m = block.attn, block.mlp
    lin = sum(2.0 * 2 * n * t * mod.weight.numel() for mod in (a.qkv, a.proj, m.fc1, m.fc2))
    shape = (n, a.num_heads, t, a.head_dim)
    return lin + sdpa_backward_flop_count(shape, shape, shape, shape)


def fused_block(block: nn.Module, x: torch.Tensor, state: SamplingState, l: int) -> torch.Tensor:
    """The block's output through `_FusedBlockFn` (SampleA on its output included)."""
    return _FusedBlockFn.apply(x, state, l, block, *block_params(block))
