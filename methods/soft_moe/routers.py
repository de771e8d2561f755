"""The sparse baselines of Soft MoE's comparison, on the same expert bank.

Routing groups are single images, so a sample's output never depends on its batch-mates.
Capacity is `capacity_factor · m / n` tokens per expert per image.
"""
from __future__ import annotations

import math

import torch
from einops import einsum
from torch import nn

from methods.soft_moe.layers import Experts


class SparseRouter(nn.Module):
    """A linear router over the shared expert bank; subclasses set `aux_loss` and `dropped`
    (the fraction of tokens no expert processed) on every forward."""

    def __init__(self, dim: int, num_experts: int, capacity_factor: float = 1.0, hidden_dim: int | None = None):
        super().__init__()
        self.n, self.capacity_factor = num_experts, capacity_factor
        self.router = nn.Linear(dim, num_experts, bias=False)
        self.experts = Experts(num_experts, dim, hidden_dim or 4 * dim)
        self.aux_loss = torch.zeros(())
        self.dropped = torch.zeros(())


class TokensChoice(SparseRouter):
    """Top-1 routing (Switch / V-MoE): each token picks its best expert; experts keep at most
    `capacity` tokens, chosen by Batch Priority Routing (highest gate first); the rest are
    dropped (output 0, so the residual carries them). Sets `aux_loss` (Switch's load balance
    n · Σ_e f_e P_e) and `dropped` (fraction of tokens dropped) on every forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, m, _ = x.shape
        cap = max(1, math.ceil(self.capacity_factor * m / self.n))
        probs = self.router(x).softmax(-1)                                  # (B, m, n)
        gate, expert = probs.max(-1)                                        # (B, m)
        choice = nn.functional.one_hot(expert, self.n).to(x.dtype)          # (B, m, n)
        # position of each token in its expert's queue, highest gate first (BPR)
        order = gate.argsort(dim=1, descending=True)
        ranked = torch.gather(choice, 1, order[..., None].expand(-1, -1, self.n))
        pos_ranked = (ranked.cumsum(1) - 1) * ranked
        position = torch.empty_like(pos_ranked).scatter_(1, order[..., None].expand(-1, -1, self.n), pos_ranked)
        kept = choice * (position < cap)                                    # (B, m, n)
        slot = nn.functional.one_hot(position.long().clamp(max=cap - 1), cap).to(x.dtype)   # (B, m, n, c)
        dispatch = kept[..., None] * slot                                   # (B, m, n, c)
        expert_in = einsum(dispatch, x, "b m n c, b m d -> b n c d")
        expert_out = self.experts(expert_in)
        y = einsum(dispatch * gate[..., None, None], expert_out, "b m n c, b n c d -> b m d")
        self.dropped = 1.0 - kept.sum() / (b * m)
        fraction = choice.mean(dim=(0, 1))                                  # f_e
        mean_prob = probs.mean(dim=(0, 1))                                  # P_e
        self.aux_loss = self.n * (fraction * mean_prob).sum()
        return y


class ExpertsChoice(SparseRouter):
    """Each expert picks its top-`capacity` tokens by gate (softmax over experts per token)
    (Zhou et al. 2022); a token may be picked by several experts or by none."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, m, d = x.shape
        cap = max(1, min(m, math.ceil(self.capacity_factor * m / self.n)))
        probs = self.router(x).softmax(-1)                                  # (B, m, n)
        gate, index = probs.transpose(1, 2).topk(cap, dim=-1)               # (B, n, c)
        expert_in = torch.gather(x[:, None].expand(b, self.n, m, d), 2, index[..., None].expand(-1, -1, -1, d))
        expert_out = self.experts(expert_in) * gate[..., None]              # (B, n, c, d)
        y = torch.zeros_like(x).scatter_add_(1, index.reshape(b, -1, 1).expand(-1, -1, d),
                                             expert_out.reshape(b, -1, d))
        picked = torch.zeros(b, m, device=x.device).scatter_(1, index.reshape(b, -1), 1.0)
        self.dropped = 1.0 - picked.mean()
        return y
