"""LightHGNN's distillation losses and hyperedge reliability (Feng et al., ICLR 2024)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """τ² · KL(softmax(z_t/τ) ‖ softmax(z_s/τ)), averaged over vertices (LightHGNN eq. 4's soft term)."""
    log_p_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_p_t = F.log_softmax(teacher_logits / temperature, dim=-1)
    return temperature ** 2 * F.kl_div(log_p_s, log_p_t, log_target=True, reduction="batchmean")


def official_kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """The official student loss (`train_stu` in trans_train.py), kept as a comparison row:
    F.kl_div(log_softmax(z_s), softmax(z_t), reduction="batchmean", log_target=True). With
    log_target=True the teacher's probabilities p_t are read as log-probabilities, so this is
    (1/V) Σ_v Σ_c e^{p_t,vc} (p_t,vc − log p_s,vc), minimised by p_s = softmax(p_t), a flatter
    target than p_t; no temperature is applied (official τ = 1)."""
    return F.kl_div(F.log_softmax(student_logits, dim=-1), F.softmax(teacher_logits, dim=-1),
                    reduction="batchmean", log_target=True)


KD_FORMS = {"paper": kd_loss, "official": lambda s, t, temperature: official_kd_loss(s, t)}


def hyperedge_mean(values: torch.Tensor, members: torch.Tensor, edge_of: torch.Tensor, num_edges: int) -> torch.Tensor:
    """Mean of `values` (V, ...) over each hyperedge's vertices  → (E, ...); members/edge_of are
    the flattened (vertex, hyperedge) incidence pairs (DHG's `v2e(aggr="mean")`)."""
    shape = (num_edges,) + values.shape[1:]
    total = values.new_zeros(shape).index_add_(0, edge_of, values[members])
    count = values.new_zeros(num_edges).index_add_(0, edge_of, torch.ones_like(edge_of, dtype=values.dtype))
    return total / count.view(-1, *([1] * (values.dim() - 1)))


def hyperedge_kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, members: torch.Tensor,
                      edge_of: torch.Tensor, num_edges: int, sampled: torch.Tensor, temperature: float) -> torch.Tensor:
    """τ² · KL between the teacher's and the student's hyperedge soft labels (the mean softmax
    of the vertices) over the sampled hyperedges (LightHGNN+, eq. 8)."""
    p_s = hyperedge_mean((student_logits / temperature).softmax(-1), members, edge_of, num_edges)[sampled]
    p_t = hyperedge_mean((teacher_logits / temperature).softmax(-1), members, edge_of, num_edges)[sampled]
    return temperature ** 2 * F.kl_div(p_s.clamp_min(1e-12).log(), p_t, reduction="batchmean")


def lighthgnn_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
                   train_idx: torch.Tensor, ce_weight: float, temperature: float,
                   members: torch.Tensor | None = None, edge_of: torch.Tensor | None = None,
                   num_edges: int = 0, sampled: torch.Tensor | None = None,
                   kd: str = "paper") -> tuple[torch.Tensor, dict]:
    """λ · CE(z_s, y) on the labelled vertices + (1 − λ) · (KD + HKD) (eq. 4; LightHGNN+ adds
    HKD inside the (1 − λ) term, as the official `train_stu`). KD is over every vertex the
    student trains on: the paper's τ²·KL (kd="paper") or the official code's log_target reading
    (kd="official", `official_kd_loss`); HKD over the `sampled` hyperedges (None: LightHGNN, no
    HKD). A term with weight 0 is not computed. Returns (loss, {"ce", "kd", "hkd"} of the computed terms)."""
    if kd not in KD_FORMS:
        raise ValueError(f"kd must be one of {sorted(KD_FORMS)}, got {kd!r}")
    parts: dict[str, torch.Tensor] = {}
    loss = student_logits.new_zeros(())
    if ce_weight > 0:
        parts["ce"] = F.cross_entropy(student_logits[train_idx], labels[train_idx])
        loss = loss + ce_weight * parts["ce"]
    if ce_weight < 1:
        soft = parts["kd"] = KD_FORMS[kd](student_logits, teacher_logits, temperature)
        if sampled is not None and len(sampled):
            parts["hkd"] = hyperedge_kd_loss(student_logits, teacher_logits, members, edge_of, num_edges,
                                             sampled, temperature)
            soft = soft + parts["hkd"]
        loss = loss + (1 - ce_weight) * soft
    return loss, {k: v.detach() for k, v in parts.items()}


def prediction_entropy(logits: torch.Tensor) -> torch.Tensor:
    """(V, C) -> (V,) entropy of the softmax."""
    p = logits.softmax(-1)
    return -(p * p.clamp_min(1e-12).log()).sum(-1)


def reliability(clean_logits: torch.Tensor, noisy_logits: torch.Tensor, members: torch.Tensor,
                edge_of: torch.Tensor, num_edges: int) -> torch.Tensor:
    """ρ_e = 1 − δ_e / max δ, δ_e = |change of the mean prediction entropy of e's vertices|
    when the teacher's input features are perturbed (LightHGNN+, eq. 6-7)  → (E,)."""
    h_clean = hyperedge_mean(prediction_entropy(clean_logits), members, edge_of, num_edges)
    h_noisy = hyperedge_mean(prediction_entropy(noisy_logits), members, edge_of, num_edges)
    delta = (h_clean - h_noisy).abs()
    return 1 - delta / delta.max().clamp_min(1e-12)
