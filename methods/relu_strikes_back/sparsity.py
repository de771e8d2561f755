"""Activation sparsity (§3), aggregated sparsity and its two controls (§5), FFN FLOPs with zero
activations skipped (Fig. 1), shifted ReLU (§5). Pure functions of recorded FFN activations."""
from __future__ import annotations

import torch
from torch import nn


class ShiftedReLU(nn.Module):
    """max(x − b, 0) (§5: b > 0 raises sparsity); shift 0 is ReLU."""

    def __init__(self, shift: float = 0.0):
        super().__init__()
        self.shift = float(shift)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x - self.shift) if self.shift else torch.relu(x)

    def extra_repr(self) -> str:
        return f"shift={self.shift}"


def _check(acts: torch.Tensor) -> torch.Tensor:
    if not isinstance(acts, torch.Tensor) or acts.dim() not in (2, 3):
        raise ValueError(f"acts must be a (T, n) or (B, T, n) tensor, got "
                         f"{tuple(acts.shape) if isinstance(acts, torch.Tensor) else type(acts).__name__}")
    if acts.numel() == 0:
        raise ValueError(f"acts is empty (shape {tuple(acts.shape)})")
    return acts if acts.dim() == 3 else acts[None]


def activation_sparsity(acts: torch.Tensor, threshold: float = 0.0) -> float:
    """Fraction of activations with |a| <= threshold over all tokens and neurons (exact zeros at 0)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    acts = _check(acts)
    return float((acts.abs() <= threshold).double().mean())


def aggregated_sparsity(acts: torch.Tensor) -> torch.Tensor:
    """s_agg(t): fraction of neurons zero at every token 1..t of a sequence, mean over sequences;
    (T,) float64. Non-zero = active."""
    active = _check(acts) != 0                              # (B, T, n)
    ever = torch.cummax(active.to(torch.uint8), dim=1).values.bool()
    return (~ever).double().mean(dim=(0, 2))


def shuffled_aggregated_sparsity(acts: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Control: the same token rows in a seeded random order across sequences (keeps each neuron's
    firing rate, breaks within-sequence reuse), then aggregated."""
    acts = _check(acts)
    b, t, n = acts.shape
    perm = torch.randperm(b * t, generator=torch.Generator().manual_seed(seed))
    return aggregated_sparsity(acts.reshape(b * t, n)[perm].reshape(b, t, n))


def uniform_aggregated_sparsity(acts: torch.Tensor) -> torch.Tensor:
    """Control (closed form): mean_b Π_{τ<=t} (1 − k_τ/n), k_τ active neurons at token τ drawn
    uniformly at random and independently."""
    acts = _check(acts)
    n = acts.shape[-1]
    free = 1.0 - (acts != 0).double().sum(-1) / n           # (B, T)
    return torch.cumprod(free, dim=1).mean(dim=0)


def ffn_flops(acts: torch.Tensor, d_model: int, gated: bool = False) -> dict[str, float]:
    """FFN matmul FLOPs (2·m·n·k) over the N tokens of `acts` (..., inner): dense = 2·mats·N·d·inner
    (mats 2, or 3 gated); skipping zero activations keeps the first projection (gate, or up) and
    2·(mats − 1)·d·nnz(a). ratio = sparse / dense."""
    acts = _check(acts)
    if d_model < 1:
        raise ValueError(f"d_model must be >= 1, got {d_model}")
    mats = 3 if gated else 2
    tokens, inner = acts.shape[0] * acts.shape[1], acts.shape[2]
    dense = 2.0 * mats * tokens * d_model * inner
    sparse = 2.0 * tokens * d_model * inner + 2.0 * (mats - 1) * d_model * float((acts != 0).sum())
    return {"dense": dense, "sparse": sparse, "ratio": sparse / dense}
