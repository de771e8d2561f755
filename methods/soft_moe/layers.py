"""Soft MoE (Puigcerver et al., ICLR 2024, "From Sparse to Soft Mixtures of Experts") and the
expert bank every router shares. Shapes: B images, m tokens, d width, n experts, p slots per
expert, s = n·p slots, h expert hidden width."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import nn

from common.kernels import IMPLS, resolve_impl
from common.kernels.soft_moe import soft_moe


class Experts(nn.Module):
    """n two-layer GELU MLPs as batched weights: one einsum per layer, no loop over experts."""

    def __init__(self, num_experts: int, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        self.b1 = nn.Parameter(torch.zeros(num_experts, hidden_dim))
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        self.b2 = nn.Parameter(torch.zeros(num_experts, dim))
        for w in (self.w1, self.w2):  # as nn.Linear's default, per expert
            bound = 1 / math.sqrt(w.shape[1])
            nn.init.uniform_(w, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, n, p, d), the p inputs of each expert -> (B, n, p, d)."""
        h = F.gelu(einsum(x, self.w1, "b n p d, n d h -> b n p h") + self.b1[:, None])
        return einsum(h, self.w2, "b n p h, n h d -> b n p d") + self.b2[:, None]


class SoftMoE(nn.Module):
    """Y = C · Experts(Dᵀ X), with D = softmax over tokens and C = softmax over slots of the
    same logits normalize(X) · (scale · normalize(Φ)) (Soft MoE, Algorithm 1 with the
    normalisation of section 2.3).

    `dispatch` / `combine` = "soft" (learned) or "uniform" give the Table 2 ablations;
    "identity" sends token i to slot i (needs m = n·p).

    scale_init: the learned scale's start (official code: 1, so the logits start in [-1, 1] and
    routing near uniform; √d gives Algorithm 1's un-normalised logits X·Φ at initialisation,
    whose LayerNorm'd tokens have norm √d and LeCun-normal columns of Φ norm ≈ 1).
    kernels (hardware.kernels): "reference" | "triton" | "auto" (common.kernels.resolve_impl); where it
    resolves to Triton, soft/soft routing runs common.kernels.soft_moe's fused kernel (D and C never
    materialised), elsewhere (and for the ablations, and return_weights) this module's einsums.
    """

    def __init__(self, dim: int, num_experts: int, slots_per_expert: int = 1, hidden_dim: int | None = None,
                 dispatch: str = "soft", combine: str = "soft", scale_init: float = 1.0, kernels: str = "reference"):
        super().__init__()
        if kernels not in IMPLS:
            raise ValueError(f"kernels must be one of {IMPLS}, got '{kernels}'")
        self.n, self.p = num_experts, slots_per_expert
        self.dispatch_kind, self.combine_kind, self.kernels = dispatch, combine, kernels
        slots = num_experts * slots_per_expert
        self.phi = nn.Parameter(torch.randn(dim, slots) / math.sqrt(dim))   # LeCun normal (fan-in d)
        self.scale = nn.Parameter(torch.full((), float(scale_init)))
        self.experts = Experts(num_experts, dim, hidden_dim or 4 * dim)

    def weights(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Dispatch D (softmax over the m tokens) and combine C (softmax over the s slots), both (B, m, s)."""
        logits = einsum(F.normalize(x, dim=-1), self.scale * F.normalize(self.phi, dim=0), "b m d, d s -> b m s")
        return _route(self.dispatch_kind, logits, axis=1), _route(self.combine_kind, logits, axis=2)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        """x: (B, m, d) -> (B, m, d); with return_weights also (D, C), each (B, m, n·p)."""
        fused = not return_weights and self.dispatch_kind == self.combine_kind == "soft"
        if fused and resolve_impl(self.kernels, x.device) == "triton":
            e = self.experts   # D and C are never materialised (common/kernels/soft_moe)
            return soft_moe(x, self.phi, self.scale, e.w1, e.b1, e.w2, e.b2, impl="triton")
        dispatch, combine = self.weights(x)
        slots_in = einsum(dispatch, x, "b m s, b m d -> b s d")                        # X̃ = Dᵀ X
        slots_out = self.experts(rearrange(slots_in, "b (n p) d -> b n p d", n=self.n))
        y = einsum(combine, rearrange(slots_out, "b n p d -> b (n p) d"), "b m s, b s d -> b m d")
        return (y, dispatch, combine) if return_weights else y


def _route(kind: str, logits: torch.Tensor, axis: int) -> torch.Tensor:
    """Routing weights (B, m, s) that sum to 1 along `axis` (1: over tokens, 2: over slots)."""
    if kind == "soft":
        return logits.softmax(dim=axis)
    if kind == "uniform":
        return torch.full_like(logits, 1.0 / logits.shape[axis])
    if kind == "identity":
        b, m, s = logits.shape
        if m != s:
            raise ValueError(f"identity routing needs tokens == slots, got {m} tokens and {s} slots")
        return torch.eye(m, dtype=logits.dtype, device=logits.device).expand(b, m, s)
    raise ValueError(f"routing must be 'soft', 'uniform' or 'identity', got '{kind}'")


def normalised_entropy(weights: torch.Tensor, axis: int) -> torch.Tensor:
    """Mean entropy of the distributions along `axis` of (B, m, s) routing weights, over log of
    their support: 1 = uniform, 0 = one-hot. axis 1: each slot's dispatch over tokens; axis 2:
    each token's combine over slots."""
    size = weights.shape[axis]
    if size == 1:
        return weights.new_zeros(())
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(axis)
    return entropy.mean() / math.log(size)
