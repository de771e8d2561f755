"""LightHGNN's distillation losses and hyperedge reliability (Feng et al., ICLR 2024)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """τ² · KL(softmax(z_t/τ) ‖ softmax(z_s/τ)), averaged over vertices (LightHGNN eq. 4's soft term)."""
    log_p_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_p_t = F.log_softmax(teacher_logits / temperature, dim=-1)
    return temperature ** 2 * F.kl_div(log_p_s, log_p_t, log_target=True, reduction="batchmean")


def lighthgnn_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
                   train_idx: torch.Tensor, weight: float, temperature: float,
                   kd_idx: torch.Tensor | None = None) -> torch.Tensor:
    """λ · CE(z_s, y) on labelled vertices + (1 − λ) · τ² · KL on all vertices (eq. 4); in the
    inductive setting `kd_idx` limits the KL to the vertices seen in training."""
    ce = F.cross_entropy(student_logits[train_idx], labels[train_idx])
    s, t = (student_logits, teacher_logits) if kd_idx is None else (student_logits[kd_idx], teacher_logits[kd_idx])
    return weight * ce + (1 - weight) * kd_loss(s, t, temperature)


def prediction_entropy(logits: torch.Tensor) -> torch.Tensor:
    p = logits.softmax(-1)
    return -(p * p.clamp_min(1e-12).log()).sum(-1)


def hyperedge_mean(values: torch.Tensor, members: torch.Tensor, edge_of: torch.Tensor, num_edges: int) -> torch.Tensor:
    """Mean of `values` (V, ...) over each hyperedge's vertices; members/edge_of are the
    flattened (vertex, hyperedge) incidence pairs."""
    shape = (num_edges,) + values.shape[1:]
    total = torch.zeros(shape, dtype=values.dtype).index_add_(0, edge_of, values[members])
    count = torch.zeros(num_edges, dtype=values.dtype).index_add_(0, edge_of, torch.ones_like(edge_of, dtype=values.dtype))
    return total / count.view(-1, *([1] * (values.dim() - 1)))


def reliability(clean_logits: torch.Tensor, noisy_logits: torch.Tensor, members: torch.Tensor,
                edge_of: torch.Tensor, num_edges: int) -> torch.Tensor:
    """ρ_e = 1 − δ_e / max δ, δ_e = |change of the mean prediction entropy of e's vertices|
    when the teacher's input features are perturbed (LightHGNN+, eq. 6-7)."""
    h_clean = hyperedge_mean(prediction_entropy(clean_logits), members, edge_of, num_edges)
    h_noisy = hyperedge_mean(prediction_entropy(noisy_logits), members, edge_of, num_edges)
    delta = (h_clean - h_noisy).abs()
    return 1 - delta / delta.max().clamp_min(1e-12)


def hyperedge_kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, members: torch.Tensor,
                      edge_of: torch.Tensor, num_edges: int, sampled: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL between teacher and student hyperedge soft labels (mean softmax of the vertices)
    over the sampled hyperedges (LightHGNN+, eq. 8)."""
    p_s = hyperedge_mean((student_logits / temperature).softmax(-1), members, edge_of, num_edges)[sampled]
    p_t = hyperedge_mean((teacher_logits / temperature).softmax(-1), members, edge_of, num_edges)[sampled]
    return temperature ** 2 * F.kl_div(p_s.clamp_min(1e-12).log(), p_t, reduction="batchmean")
