"""HGNN teacher (Feng et al. 2019), the MLP student of LightHGNN (Feng et al., ICLR 2024) and
the student's training objective. The teacher and the operator follow DHG's HGNNConv and
`Hypergraph.smoothing_with_HGNN`; the student DHG's `MLP([d, hidden])` + Linear, as the
official `my_model.MyMLPs`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common.kernels import resolve_impl
from common.kernels.segment import offsets_from_ids, segment_sum
from methods.lighthgnn.loss import KD_FORMS, lighthgnn_loss


def with_self_loops(edges: list[list[int]], num_vertices: int) -> list[list[int]]:
    """A vertex in no hyperedge gets a self-loop hyperedge {v} (the official `fix_iso_v`)."""
    covered = torch.zeros(num_vertices, dtype=torch.bool)
    for e in edges:
        covered[e] = True
    return edges + [[v] for v in torch.nonzero(~covered).flatten().tolist()]


def incidence(edges: list[list[int]], num_vertices: int) -> torch.Tensor:
    """Sparse incidence matrix H (|V| × |E|), H[v, e] = 1 when v ∈ e."""
    rows = torch.tensor([v for e in edges for v in e])
    cols = torch.tensor([j for j, e in enumerate(edges) for _ in e])
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(len(rows)), (num_vertices, len(edges)),
                                   check_invariants=True).coalesce()


def _coo(idx: torch.Tensor, values: torch.Tensor, shape) -> torch.Tensor:
    return torch.sparse_coo_tensor(idx, values, shape, check_invariants=False).coalesce()


class HGNNSmoothing(nn.Module):
    """X ↦ D_v^{-1/2} H W_e D_e^{-1} Hᵀ D_v^{-1/2} X with W_e = I, as two sparse products with H
    (never the |V| × |V| matrix DHG builds). `impl` (hardware.kernels): the Triton segment sum
    of common/kernels where it resolves to Triton (CUDA), torch.sparse elsewhere; on the CPU
    torch.sparse is kept because the segment-sum reference differs from it in the last bit
    (torch.sparse fuses the multiply-add) and is 2-4x slower there (README, Deviations)."""

    def __init__(self, edges: list[list[int]], num_vertices: int, impl: str = "reference"):
        super().__init__()
        H = incidence(with_self_loops(edges, num_vertices), num_vertices)
        dv = torch.sparse.sum(H, dim=1).to_dense()          # (V,) vertex degrees
        de = torch.sparse.sum(H, dim=0).to_dense()          # (E,) hyperedge degrees
        idx, val = H.indices(), H.values()
        left = val * dv[idx[0]].rsqrt()                     # D_v^{-1/2} H
        right = val * dv[idx[0]].rsqrt() / de[idx[1]]       # (D_e^{-1} Hᵀ D_v^{-1/2})ᵀ entries
        shape = H.shape
        self.impl = impl
        self.register_buffer("left", _coo(idx, left, shape))                          # (V, E)
        self.register_buffer("right_t", _coo(idx.flip(0), right, (shape[1], shape[0])))  # (E, V)

    @staticmethod
    def _csr(coo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(row offsets, column index, values) of a coalesced (row-sorted) COO matrix."""
        (rows, cols), vals = coo.indices(), coo.values()
        return offsets_from_ids(rows, coo.shape[0]), cols, vals

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(V, c) -> (V, c)."""
        if resolve_impl(self.impl, x.device) == "triton":
            on_edges = segment_sum(x, *self._csr(self.right_t), impl="triton")       # (E, c)
            return segment_sum(on_edges, *self._csr(self.left), impl="triton")       # (V, c)
        return torch.sparse.mm(self.left, torch.sparse.mm(self.right_t, x))


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)` that also takes a sparse CSR x (bag-of-words features are ~1% non-zero)."""
    if x.layout == torch.sparse_csr:
        return torch.sparse.mm(x, layer.weight.T) + layer.bias
    return layer(x)


class HGNN(nn.Module):
    """Two HGNN convolutions (DHG's HGNNConv): emb = dropout(ReLU(smooth(X Θ₁))), logits =
    smooth(emb Θ₂). The hypergraph comes with the input (`forward(x, smoothing)`), as DHG's
    `net(X, G)`, so one trained teacher runs on the observed and on the full hypergraph."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 32, dropout: float = 0.5):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.theta1, self.theta2 = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes)
        self.dropout = dropout

    def embed(self, x: torch.Tensor, smoothing: HGNNSmoothing) -> torch.Tensor:
        """(V, d) -> (V, hidden): the first layer's output, where the official topology score is taken."""
        return F.dropout(F.relu(smoothing(linear(self.theta1, x))), self.dropout, self.training)

    def forward(self, x: torch.Tensor, smoothing: HGNNSmoothing) -> torch.Tensor:
        """(V, d) -> (V, C) logits."""
        return smoothing(self.theta2(self.embed(x, smoothing)))

    def training_step(self, batch: dict) -> tuple[torch.Tensor, dict]:
        """Cross-entropy on the labelled vertices (full batch: every vertex goes through the operator)."""
        logits = self(batch["x"], batch["smoothing"])
        train = batch["train"]
        return F.cross_entropy(logits[train], batch["labels"][train]), {}


class MLPStudent(nn.Module):
    """Linear(d, hidden) → ReLU → BatchNorm → Dropout → Linear(C): needs no hypergraph at inference."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, dropout: float = 0.5):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.inp, self.out = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes)
        self.norm, self.dropout = nn.BatchNorm1d(hidden), nn.Dropout(dropout)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """(V, d) -> (V, hidden): DHG's MLP([d, hidden]) output, the official topology score's input."""
        return self.dropout(self.norm(F.relu(linear(self.inp, x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(V, d) -> (V, C) logits."""
        return self.out(self.embed(x))


class Distillation(nn.Module):
    """A student and its objective: λ·CE + (1 − λ)·(KD + HKD) (`loss.lighthgnn_loss`).
    λ = 1 is the plain MLP (labels only); `hyperedge_kd` adds LightHGNN+'s hyperedge term on
    the hyperedges that the batch samples; `kd` = "official" trains on the official code's
    log_target KD (`loss.official_kd_loss`) instead of the paper's KL. Defaults are the official
    ones (λ = 0, τ = 1) with the paper's KL."""

    def __init__(self, student: nn.Module, ce_weight: float = 0.0, temperature: float = 1.0,
                 hyperedge_kd: bool = False, kd: str = "paper"):
        super().__init__()
        if kd not in KD_FORMS:
            raise ValueError(f"kd must be one of {sorted(KD_FORMS)}, got {kd!r}")
        if not 0.0 <= ce_weight <= 1.0:
            raise ValueError(f"ce_weight (λ) must be in [0, 1], got {ce_weight}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.student, self.ce_weight, self.temperature = student, ce_weight, temperature
        self.hyperedge_kd, self.kd = hyperedge_kd, kd

    def training_step(self, batch: dict) -> tuple[torch.Tensor, dict]:
        logits = self.student(batch["x"])                                  # (V, C)
        sampled = batch["sampled"] if self.hyperedge_kd else None
        loss, parts = lighthgnn_loss(logits, batch["teacher_logits"], batch["labels"], batch["train"],
                                     self.ce_weight, self.temperature, batch["members"], batch["edge_of"],
                                     batch["num_edges"], sampled, self.kd)
        return loss, parts
