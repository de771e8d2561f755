"""The Soft MoE layer (Puigcerver et al., ICLR 2024, Algorithm 1 with the normalisation of
section 2.3), in plain PyTorch: the spec. Shapes: B images, m tokens, d width, n experts,
p slots per expert, s = n·p slots, h expert hidden width.

    logits = normalize(X) · (scale · normalize(Φ))           (B, m, s)
    D = softmax over the m tokens,  C = softmax over the s slots  (of the same logits)
    X̃ = Dᵀ X  (B, s, d) -> expert e gets its p slots -> Ỹ = MLP_e(X̃)  -> Y = C Ỹ  (B, m, d)

The experts are n two-layer GELU MLPs as batched weights (methods/soft_moe/layers.py's Experts).
"""
from __future__ import annotations

import torch.nn.functional as F
from einops import einsum, rearrange


def router_logits(x, phi, scale):
    """normalize(x) · scale · normalize(phi): (B, m, d), (d, s), () -> (B, m, s)."""
    return einsum(F.normalize(x, dim=-1), scale * F.normalize(phi, dim=0), "b m d, d s -> b m s")


def experts(slots, w1, b1, w2, b2):
    """slots (B, n, p, d) -> (B, n, p, d): expert e's MLP on its p slots."""
    h = F.gelu(einsum(slots, w1, "b n p d, n d h -> b n p h") + b1[:, None])
    return einsum(h, w2, "b n p h, n h d -> b n p d") + b2[:, None]


def soft_moe(x, phi, scale, w1, b1, w2, b2):
    """x (B, m, d); router phi (d, s), scale (); experts w1 (n, d, h), b1 (n, h), w2 (n, h, d),
    b2 (n, d) with s = n·p. Returns (B, m, d)."""
    logits = router_logits(x, phi, scale)
    dispatch, combine = logits.softmax(dim=1), logits.softmax(dim=2)               # (B, m, s) each
    slots_in = einsum(dispatch, x, "b m s, b m d -> b s d")                       # X̃ = Dᵀ X
    slots_out = experts(rearrange(slots_in, "b (n p) d -> b n p d", n=w1.shape[0]), w1, b1, w2, b2)
    return einsum(combine, rearrange(slots_out, "b n p d -> b (n p) d"), "b m s, b s d -> b m d")
