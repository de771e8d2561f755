"""The sparse baselines of Soft MoE's comparison, on the same expert bank.

Tokens are routed in groups of `group_size` images (V-MoE's setting: 8 images per group);
capacity is `capacity_factor · tokens per group / n` per expert. With group_size = 1 a
sample's output never depends on its batch-mates; with more, it does (as in the paper's sparse
models, at training and at evaluation). A batch that is not a multiple of the group size routes
its last images as one smaller group.
"""
from __future__ import annotations

import math

import torch
from einops import einsum, rearrange
from torch import nn

from methods.soft_moe.layers import Experts


class SparseRouter(nn.Module):
    """A linear router over the shared expert bank; subclasses set `aux_loss` and `dropped`
    (the fraction of tokens no expert processed) on every forward."""

    def __init__(self, dim: int, num_experts: int, capacity_factor: float = 1.0, hidden_dim: int | None = None,
                 group_size: int = 1):
        super().__init__()
        if group_size < 1:
            raise ValueError(f"group_size (images per routing group) must be >= 1, got {group_size}")
        self.n, self.capacity_factor, self.group_size = num_experts, capacity_factor, group_size
        self.router = nn.Linear(dim, num_experts, bias=False)
        self.experts = Experts(num_experts, dim, hidden_dim or 4 * dim)
        self.aux_loss = torch.zeros(())
        self.dropped = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, m, d) -> (B, m, d), routing each group of `group_size` images together."""
        b, m, d = x.shape
        g = min(self.group_size, b)
        full = b - b % g
        parts = [(x[:full], g)] + ([(x[full:], b - full)] if full < b else [])
        outs, kept, choices, probs = [], 0.0, [], []
        for xs, size in parts:
            y, k, choice, prob = self.route(rearrange(xs, "(G g) m d -> G (g m) d", g=size))
            outs.append(rearrange(y, "G (g m) d -> (G g) m d", g=size))
            kept, choices, probs = kept + k, choices + [choice.reshape(-1, self.n)], probs + [prob.reshape(-1, self.n)]
        self.dropped = 1.0 - kept / (b * m)
        self.aux_loss = self.balance_loss(torch.cat(choices), torch.cat(probs))
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def balance_loss(self, choice: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), device=probs.device)

    def route(self, x: torch.Tensor):
        """x (G, T, d), T tokens per group -> (y (G, T, d), tokens kept, top-1 one-hot (G, T, n), gates (G, T, n))."""
        raise NotImplementedError


class TokensChoice(SparseRouter):
    """Top-1 routing (Switch / V-MoE): each token picks its best expert; experts keep at most
    `capacity` tokens of their group, chosen by Batch Priority Routing (highest gate first); the
    rest are dropped (output 0, so the residual carries them). `aux_loss` is Switch's load
    balance n · Σ_e f_e P_e over the batch, `dropped` the fraction of tokens dropped."""

    def route(self, x: torch.Tensor):
        _, t, _ = x.shape
        cap = max(1, math.ceil(self.capacity_factor * t / self.n))
        probs = self.router(x).softmax(-1)                                  # (G, T, n)
        gate, expert = probs.max(-1)                                        # (G, T)
        choice = nn.functional.one_hot(expert, self.n).to(x.dtype)          # (G, T, n)
        # position of each token in its expert's queue, highest gate first (BPR)
        order = gate.argsort(dim=1, descending=True)
        ranked = torch.gather(choice, 1, order[..., None].expand(-1, -1, self.n))
        pos_ranked = (ranked.cumsum(1) - 1) * ranked
        position = torch.empty_like(pos_ranked).scatter_(1, order[..., None].expand(-1, -1, self.n), pos_ranked)
        kept = choice * (position < cap)                                    # (G, T, n)
        slot = nn.functional.one_hot(position.long().clamp(max=cap - 1), cap).to(x.dtype)   # (G, T, n, c)
        dispatch = kept[..., None] * slot                                   # (G, T, n, c)
        expert_in = einsum(dispatch, x, "b m n c, b m d -> b n c d")
        expert_out = self.experts(expert_in)
        y = einsum(dispatch * gate[..., None, None], expert_out, "b m n c, b n c d -> b m d")
        return y, kept.sum(), choice, probs

    def balance_loss(self, choice: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """choice, probs: (tokens, n) -> n · Σ_e f_e P_e (Switch Transformer, eq. 4)."""
        return self.n * (choice.mean(0) * probs.mean(0)).sum()


class ExpertsChoice(SparseRouter):
    """Each expert picks its top-`capacity` tokens of the group by gate (softmax over experts
    per token) (Zhou et al. 2022); a token may be picked by several experts or by none."""

    def route(self, x: torch.Tensor):
        b, t, d = x.shape
        cap = max(1, min(t, math.ceil(self.capacity_factor * t / self.n)))
        probs = self.router(x).softmax(-1)                                  # (G, T, n)
        gate, index = probs.transpose(1, 2).topk(cap, dim=-1)               # (G, n, c)
        expert_in = torch.gather(x[:, None].expand(b, self.n, t, d), 2, index[..., None].expand(-1, -1, -1, d))
        expert_out = self.experts(expert_in) * gate[..., None]              # (G, n, c, d)
        y = torch.zeros_like(x).scatter_add_(1, index.reshape(b, -1, 1).expand(-1, -1, d),
                                             expert_out.reshape(b, -1, d))
        picked = torch.zeros(b, t, device=x.device).scatter_(1, index.reshape(b, -1), 1.0)
        return y, picked.sum(), probs, probs
