"""EViT token reduction for timm's VisionTransformer with a class token (Liang et al. 2022; the
score and the block as in METR's official metr/metr_evit.py `Attention` and `Block`).

A reducing block computes x <- x + Attn(LN(x)), ranks the patch tokens by the attention the [CLS]
query pays them (softmax row of [CLS] over the block's N input tokens, mean over heads, [CLS]
column removed), keeps [CLS] and the ceil(rho (N-1)) top patch tokens in descending order and,
with `fuse`, appends one token sum_{j dropped} a_j x_j (a not renormalised), then applies the MLP.

Imported by its full path (`from common.nn.token_reduction import forward_reduced`); not
re-exported from common/nn/__init__.py, whose fingerprint other tables carry.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

SELECT = ("cls", "random")


def _check_rate(keep_rate: float) -> float:
    rate = float(keep_rate)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"keep rate must be in (0, 1], got {keep_rate}")
    return rate


def num_kept(num_patches: int, keep_rate: float) -> int:
    """ceil(rho * (N-1)) of the float product, as the official code (math.ceil)."""
    return math.ceil(_check_rate(keep_rate) * num_patches)


def _attend(attn: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """timm Attention on its (normalised) input x (B, N, C): (output (B, N, C), [CLS] attention
    (B, N-1)). The output is timm's expression (qkv, q_norm, k_norm, scaled-dot-product, norm,
    gate, proj); the score is the [CLS] query's softmax row, mean over heads, [CLS] column removed."""
    B, N, C = x.shape
    heads = attn.num_heads
    head_dim = attn.qkv.out_features // (3 * heads)
    qkv = attn.qkv(x).reshape(B, N, 3, heads, head_dim).permute(2, 0, 3, 1, 4)   # 3, B, H, N, hd
    q, k, v = qkv.unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    drop = attn.attn_drop.p if attn.training else 0.0
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)                # B, H, N, hd
    row = ((q[:, :, :1] * attn.scale) @ k.transpose(-2, -1)).softmax(dim=-1)     # B, H, 1, N
    cls_attn = row[:, :, 0, 1:].mean(dim=1)                                        # B, N-1
    out = out.transpose(1, 2).reshape(B, N, heads * head_dim)
    out = getattr(attn, "norm", nn.Identity())(out)
    gate = getattr(attn, "gate", None)
    if gate is not None:
        out = out * gate(x).sigmoid()
    return attn.proj_drop(attn.proj(out)), cls_attn


def cls_attention(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """a (B, N-1): the attention of [CLS] (token 0) to each patch token of the block's input
    x (B, N, C), computed on norm1(x) as the block's attention computes it, mean over heads."""
    if x.dim() != 3 or x.shape[1] < 2:
        raise ValueError(f"x must be (B, N, C) with N >= 2 ([CLS] and a patch), got {tuple(x.shape)}")
    return _attend(block.attn, block.norm1(x))[1]


def evit_select(x: torch.Tensor, cls_attn: torch.Tensor, keep_rate: float, fuse: bool = True,
                rank: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """EViT's selection on x (B, N, C): [CLS], then the K = ceil(rho (N-1)) patch tokens of the
    largest `rank` (default: cls_attn) in descending order, then with `fuse` the token
    sum_{j dropped} a_j x_j, a = cls_attn not renormalised. Returns (x', kept (B, K) patch indices,
    0-based among the N-1 patch tokens). When K = N-1 nothing is dropped: x unchanged, kept = 0..N-2."""
    if x.dim() != 3:
        raise ValueError(f"x must be (B, N, C), got {tuple(x.shape)}")
    B, N, C = x.shape
    if tuple(cls_attn.shape) != (B, N - 1):
        raise ValueError(f"cls_attn must be (B, N-1) = ({B}, {N - 1}), got {tuple(cls_attn.shape)}")
    if rank is None:
        rank = cls_attn
    elif tuple(rank.shape) != (B, N - 1):
        raise ValueError(f"rank must be (B, N-1) = ({B}, {N - 1}), got {tuple(rank.shape)}")
    k = num_kept(N - 1, keep_rate)
    if k == N - 1:
        return x, torch.arange(N - 1, device=x.device).expand(B, N - 1)
    kept = rank.topk(k, dim=1, largest=True, sorted=True).indices                 # B, K
    patches = x[:, 1:]                                                             # B, N-1, C
    top = patches.gather(1, kept.unsqueeze(-1).expand(-1, -1, C))                  # B, K, C
    parts = [x[:, :1], top]
    if fuse:
        weight = cls_attn.scatter(1, kept, 0.0)                                    # a_j on the dropped, 0 on the kept
        parts.append(torch.einsum("bn,bnc->bc", weight, patches).unsqueeze(1))     # B, 1, C
    return torch.cat(parts, dim=1), kept


def reduced_block(block: nn.Module, x: torch.Tensor, keep_rate: float, fuse: bool = True,
                  rank: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One EViT block (official `Block.forward`): x <- x + Attn(LN(x)); select (and fuse) by the
    [CLS] attention of this attention; x <- x + MLP(LN(x)). With nothing dropped (K = N-1) it is
    timm's block(x) itself. Returns (x' (B, 1 + K [+ 1], C), kept (B, K))."""
    if x.dim() != 3 or x.shape[1] < 2:
        raise ValueError(f"x must be (B, N, C) with N >= 2 ([CLS] and a patch), got {tuple(x.shape)}")
    B, N, _ = x.shape
    if num_kept(N - 1, keep_rate) == N - 1:
        if rank is not None and tuple(rank.shape) != (B, N - 1):
            raise ValueError(f"rank must be (B, N-1) = ({B}, {N - 1}), got {tuple(rank.shape)}")
        return block(x), torch.arange(N - 1, device=x.device).expand(B, N - 1)
    out, cls_attn = _attend(block.attn, block.norm1(x))
    x = x + block.drop_path1(block.ls1(out))
    x, kept = evit_select(x, cls_attn, keep_rate, fuse=fuse, rank=rank)
    x = x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))
    return x, kept


def _check_rates(keep_rates: Sequence[float], depth: int) -> list[float]:
    rates = list(keep_rates)
    if len(rates) != depth:
        raise ValueError(f"need one keep rate per block: {depth} blocks, got {len(rates)} rates")
    return [_check_rate(r) for r in rates]


def forward_reduced(vit: nn.Module, images: torch.Tensor, keep_rates: Sequence[float], fuse: bool = True,
                    select: str = "cls", generator: torch.Generator | None = None
                    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """timm VisionTransformer (class token, no register tokens) with EViT reduction at every block
    whose rate is < 1. select='cls' ranks by [CLS] attention; 'random' by torch.rand((B, N-1),
    generator) drawn once per reducing block in block order (fusion still weighted by the [CLS]
    attention). Returns (logits (B, classes), [CLS] after each block: depth tensors (B, C))."""
    if select not in SELECT:
        raise ValueError(f"select must be one of {SELECT}, got '{select}'")
    if getattr(vit, "cls_token", None) is None or getattr(vit, "num_prefix_tokens", 1) != 1:
        raise ValueError("forward_reduced needs a ViT with a class token and no register tokens")
    rates = _check_rates(keep_rates, len(vit.blocks))
    x = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(images))))     # B, 1 + P, C
    cls_out = []
    for block, rate in zip(vit.blocks, rates):
        if rate < 1.0:
            rank = None
            if select == "random":
                rank = torch.rand((x.shape[0], x.shape[1] - 1), generator=generator, dtype=x.dtype,
                                  device=x.device)
            x, _ = reduced_block(block, x, rate, fuse=fuse, rank=rank)
        else:
            x = block(x)
        cls_out.append(x[:, 0])
    return vit.forward_head(vit.norm(x)), cls_out


def token_counts(num_patches: int, keep_rates: Sequence[float], fuse: bool = True) -> list[int]:
    """Patch tokens leaving each block (the fused token counts as a patch token)."""
    if num_patches < 1:
        raise ValueError(f"num_patches must be >= 1, got {num_patches}")
    counts, n = [], int(num_patches)
    for rate in keep_rates:
        k = num_kept(n, rate)
        if k < n:
            n = k + (1 if fuse else 0)
        counts.append(n)
    return counts


__all__ = ["SELECT", "cls_attention", "evit_select", "forward_reduced", "num_kept", "reduced_block",
           "token_counts"]
