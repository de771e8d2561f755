"""P²OT's training loss (Zhang, Ren, He, ICLR 2024, Sec. 3): cross-entropy of each view's
logits against the pseudo-labels of the other views, as a pure function of tensors."""
from __future__ import annotations

import torch


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """mean_i −Σ_k targets_ik · log softmax(logits_i)_k; logits, targets: (B, K). The targets'
    rows may sum to less than 1 (a sample that moved only part of its mass)."""
    return -(targets * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()


def swapped_label_loss(logits: list[torch.Tensor], labels: list[torch.Tensor]) -> torch.Tensor:
    """L = Σ_{a≠b} CE(logits of view a, pseudo-labels Y of view b), each a batch mean
    (the official code's sum over ordered view pairs). logits[v], labels[v]: (B, K)."""
    if len(logits) != len(labels) or len(logits) < 2:
        raise ValueError(f"need the same number (>= 2) of logits and label views, got {len(logits)} and {len(labels)}")
    return sum(soft_cross_entropy(logits[a], labels[b].detach())
               for a in range(len(logits)) for b in range(len(labels)) if a != b)
