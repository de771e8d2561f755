"""NCL's non-negative maps and NCE's logits (Wang et al., ICLR 2024, "Non-negative Contrastive Learning").

The contrastive loss itself is SimCLR's NT-Xent (common.ssl.info_nce) on normalize(nonneg(z));
the official code (solo/methods/simclr.py) is exactly that, with the map applied to the
projector output before the L2 normalisation.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

KINDS = ("none", "relu", "rep_relu")


def nonneg(z: torch.Tensor, kind: str) -> torch.Tensor:
    """The non-negative map σ₊ on the projector output, before L2-normalisation (NCL eq. 5).

    relu:     z⁺ = ReLU(z)
    rep_relu: forward ReLU, backward GELU's gradient, so a unit that is negative on every
              sample still gets a gradient and can recover (the official CIFAR default):
              z⁺ = gelu(z) − gelu(z).detach() + relu(z).detach()
    none:     z (ordinary contrastive learning, the CL baseline)
    """
    if kind == "none":
        return z
    if kind == "relu":
        return F.relu(z)
    if kind == "rep_relu":
        g = F.gelu(z)
        return g - g.detach() + F.relu(z).detach()
    raise ValueError(f"nonneg kind must be one of {KINDS}, got '{kind}'")


def nce_logits(features: torch.Tensor, weight: torch.Tensor, kind: str) -> torch.Tensor:
    """NCE (the paper's supervised analogue): class logits σ₊(h) · σ₊(W)ᵀ, each a non-negative
    combination of non-negative features; `kind='none'` gives ordinary CE logits h · Wᵀ.

    features: (N, D) pre-activation features h; weight: (C, D) -> logits (N, C).
    """
    if kind == "none":
        return features @ weight.T
    return nonneg(features, kind) @ F.relu(weight).T
