"""Accuracy and the topology-awareness (over-smoothing) score."""
from __future__ import annotations

import torch

from methods.lighthgnn.loss import hyperedge_mean


def accuracy(logits: torch.Tensor, labels: torch.Tensor, idx: torch.Tensor) -> float:
    return float(100 * (logits[idx].argmax(-1) == labels[idx]).float().mean())


def topology_score(h: torch.Tensor, members: torch.Tensor, edge_of: torch.Tensor, num_edges: int) -> float:
    """Mean over hyperedges of the mean ‖h_v − mean_{u∈e} h_u‖ over e's vertices: how far
    representations spread within a hyperedge (lower = smoother along the hypergraph)."""
    centre = hyperedge_mean(h, members, edge_of, num_edges)                 # (E, k)
    dist = (h[members] - centre[edge_of]).norm(dim=-1)                      # per incidence pair
    per_edge = torch.zeros(num_edges).index_add_(0, edge_of, dist)
    count = torch.zeros(num_edges).index_add_(0, edge_of, torch.ones_like(dist))
    return float((per_edge / count).mean())
