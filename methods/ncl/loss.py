"""NCL's non-negative maps (Wang et al., ICLR 2024, "Non-negative Contrastive Learning")."""
from __future__ import annotations

import torch
import torch.nn.functional as F

KINDS = ("none", "relu", "rep_relu")


def nonneg(z: torch.Tensor, kind: str) -> torch.Tensor:
    """The non-negative map applied to the projector output before L2-normalisation.

    relu:     z⁺ = ReLU(z)                                  (NCL eq. 5)
    rep_relu: forward ReLU, backward GELU's gradient, so a unit that is negative on every
              sample still gets a gradient and can recover:
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
