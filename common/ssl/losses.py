"""Contrastive losses as pure functions of embeddings."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent (SimCLR, Chen et al. 2020, eq. 1) averaged over all 2N anchors.

    z1, z2: (N, d) embeddings of two views; row i of z1 and row i of z2 are positives, the
    other 2N - 2 rows are negatives. Rows are L2-normalised here.
    """
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2]), dim=1)               # (2N, d)
    sim = z @ z.T / temperature                                 # (2N, 2N)
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)
