"""The topology-awareness (over-smoothing) score of the paper, as the official `ho_topology_score`."""
from __future__ import annotations

import torch

from methods.lighthgnn.loss import hyperedge_mean


def topology_score(embeddings: torch.Tensor, members: torch.Tensor, edge_of: torch.Tensor, num_edges: int) -> float:
    """Mean over hyperedges of the mean ‖h_v − mean_{u∈e} h_u‖₂ over e's vertices, for hidden
    embeddings h (V, k): how far representations spread within a hyperedge (lower = smoother
    along the hypergraph). The official code takes h from the first layer of each model
    (HGNN: 32-d, MLP: 128-d), so scores of different models live in different spaces."""
    h = embeddings.detach().float()
    centre = hyperedge_mean(h, members, edge_of, num_edges)                 # (E, k)
    dist = (h[members] - centre[edge_of]).norm(dim=-1)                      # (pairs,)
    per_edge = hyperedge_mean(dist, torch.arange(len(dist), device=dist.device), edge_of, num_edges)  # (E,)
    return float(per_edge.mean())
