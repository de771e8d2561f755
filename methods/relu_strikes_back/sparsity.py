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


def matched_shuffled_aggregated_sparsity(acts: torch.Tensor, keys: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Control: token rows permuted only among rows with the same key (e.g. the same input id at
    the same position), across sequences, then aggregated. A featurizer of the key alone (a token /
    position lookup) gives identical rows, so its aggregated sparsity is unchanged: only reuse that
    comes from the sequence's other tokens is broken. Group g's rows, in row-major order, receive
    its rows in the order `torch.randperm(len(g), generator)` (one generator seeded `seed`, groups
    in ascending key order)."""
    acts = _check(acts)
    b, t, n = acts.shape
    keys = keys if keys.dim() == 2 else keys[None]
    if tuple(keys.shape) != (b, t):
        raise ValueError(f"keys must have shape {(b, t)} (one per token row), got {tuple(keys.shape)}")
    # one stable sort groups the rows by key (ascending; row-major inside a group): O(N log N), not
    # one O(N) mask per key. Each group still draws its own randperm, in the same order as the rule
    # above, so the draws (and the numbers) are those of the loop the tests keep as the reference.
    order = torch.sort(keys.reshape(-1), stable=True).indices
    sizes = torch.unique_consecutive(keys.reshape(-1)[order], return_counts=True)[1].tolist()
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.cat([torch.randperm(k, generator=gen) for k in sizes])      # position inside each group
    starts = torch.repeat_interleave(torch.cumsum(torch.tensor([0] + sizes[:-1]), 0), torch.tensor(sizes))
    src = torch.empty_like(order)
    src[order] = order[starts + offsets]
    return aggregated_sparsity(acts.reshape(b * t, n)[src].reshape(b, t, n))


def dead_fraction(acts: torch.Tensor) -> float:
    """Fraction of neurons that are zero on every token of `acts` (B, T, n) or (T, n): dead on this data."""
    acts = _check(acts)
    return float((~(acts != 0).reshape(-1, acts.shape[-1]).any(dim=0)).double().mean())


def live_sparsity(acts: torch.Tensor) -> float:
    """Fraction of exact zeros over tokens and the LIVE neurons only (those non-zero on some token):
    sparsity that dead neurons cannot produce. 0 when no neuron is live (all dead passes nothing)."""
    acts = _check(acts)
    flat = acts.reshape(-1, acts.shape[-1]) != 0
    live = flat.any(dim=0)
    if not bool(live.any()):
        return 0.0
    return float((~flat[:, live]).double().mean())


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
