"""HGNN teacher (Feng et al. 2019) and the MLP student of LightHGNN (Feng et al., ICLR 2024)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def with_self_loops(edges: list[list[int]], num_vertices: int) -> list[list[int]]:
    """A vertex in no hyperedge gets a self-loop hyperedge {v}."""
    covered = torch.zeros(num_vertices, dtype=torch.bool)
    for e in edges:
        covered[e] = True
    return edges + [[v] for v in torch.nonzero(~covered).flatten().tolist()]


def incidence(edges: list[list[int]], num_vertices: int) -> torch.Tensor:
    """Sparse incidence matrix H (|V| × |E|), H[v, e] = 1 when v ∈ e."""
    rows = torch.tensor([v for e in edges for v in e])
    cols = torch.tensor([j for j, e in enumerate(edges) for _ in e])
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(len(rows)), (num_vertices, len(edges)), check_invariants=True).coalesce()


class HGNNSmoothing(nn.Module):
    """X ↦ D_v^{-1/2} H W_e D_e^{-1} Hᵀ D_v^{-1/2} X with W_e = I, as two sparse products
    (never a dense |V| × |V| matrix)."""

    def __init__(self, edges: list[list[int]], num_vertices: int):
        super().__init__()
        H = incidence(with_self_loops(edges, num_vertices), num_vertices)
        dv = torch.sparse.sum(H, dim=1).to_dense()          # vertex degrees
        de = torch.sparse.sum(H, dim=0).to_dense()          # hyperedge degrees
        idx, val = H.indices(), H.values()
        left = val * dv[idx[0]].rsqrt()                     # D_v^{-1/2} H
        right = val * dv[idx[0]].rsqrt() / de[idx[1]]       # (D_e^{-1} Hᵀ D_v^{-1/2})ᵀ entries
        shape = H.shape
        self.register_buffer("left", torch.sparse_coo_tensor(idx, left, shape).coalesce())
        self.register_buffer("right_t", torch.sparse_coo_tensor(idx.flip(0), right, (shape[1], shape[0])).coalesce())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.left, torch.sparse.mm(self.right_t, x))


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)` that also takes a sparse CSR x (bag-of-words features are ~1% non-zero)."""
    if x.layout == torch.sparse_csr:
        return torch.sparse.mm(x, layer.weight.T) + layer.bias
    return layer(x)


class HGNN(nn.Module):
    """Two HGNN convolutions (DHG's HGNNConv): X' = dropout(σ(smooth(X Θ₁))), logits = smooth(X' Θ₂)."""

    def __init__(self, in_dim: int, hidden: int, num_classes: int, dropout: float, smoothing: HGNNSmoothing):
        super().__init__()
        self.smoothing = smoothing
        self.theta1, self.theta2 = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.smoothing(linear(self.theta1, x)))
        x = F.dropout(x, self.dropout, self.training)
        return self.smoothing(self.theta2(x))


class MLPStudent(nn.Module):
    """Linear(d, 128) → ReLU → BatchNorm → Dropout → Linear(C): needs no hypergraph at inference."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, dropout: float = 0.5):
        super().__init__()
        self.inp, self.out = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes)
        self.norm, self.dropout = nn.BatchNorm1d(hidden), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(self.norm(F.relu(linear(self.inp, x)))))
