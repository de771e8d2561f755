"""BESA: a learnable sparsity per output row, trained to keep a block's output unchanged.

For a row with weights ranked by Wanda importance (rank 0 = least important):
    β = softmax(θ) over candidates p_d = d/D, d = 0..D          (θ ∈ R^{D+1}, init 0)
    s = Σ_d β_d p_d                                               the row's sparsity
    hard mask: drop the ⌊s·cols⌋ lowest ranks
    soft keep-probability of rank k: P_k = 1 − Σ_{d: ⌊p_d·cols⌋ > k} β_d
    M = M_hard + P − P.detach()                                   straight-through
Weights stay frozen; only θ trains.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from methods.besa.baselines import wanda_score


class BesaLinear(nn.Module):
    """Wraps a frozen nn.Linear; `mask()` is the straight-through mask in column order."""

    def __init__(self, linear: nn.Linear, x_norm: torch.Tensor, candidates: int = 100):
        super().__init__()
        self.linear = linear
        rows, cols = linear.weight.shape
        D = candidates
        self.register_buffer("p", torch.arange(D + 1, dtype=torch.float32) / D)
        # rank of each column within its row (ascending importance) and, per rank k, the number
        # of candidates that keep it: d*(k) = #{d : ⌊p_d·cols⌋ ≤ k} (a prefix of d, as counts grow)
        order = wanda_score(linear.weight.detach().float(), x_norm.float()).argsort(dim=1)
        self.register_buffer("rank_of_col", order.argsort(dim=1))
        counts = torch.floor(self.p * cols + 1e-6).long()
        ranks = torch.arange(cols)
        self.register_buffer("dstar", (counts.unsqueeze(0) <= ranks.unsqueeze(1)).sum(1))
        self.theta = nn.Parameter(torch.zeros(rows, D + 1))

    @property
    def cols(self) -> int:
        return self.linear.weight.shape[1]

    def row_sparsity(self) -> torch.Tensor:
        return F.softmax(self.theta, dim=1) @ self.p

    def mask(self) -> torch.Tensor:
        beta = F.softmax(self.theta, dim=1)
        s = beta @ self.p
        keep_prob = beta.cumsum(1)[:, self.dstar - 1]                  # P_k, rank order
        n_drop = torch.floor(s.detach() * self.cols + 1e-6).long()
        hard = (torch.arange(self.cols, device=s.device).unsqueeze(0) >= n_drop.unsqueeze(1)).float()
        m = hard + keep_prob - keep_prob.detach()
        return m.gather(1, self.rank_of_col)                            # back to column order

    def forward(self, x):
        return F.linear(x, self.linear.weight * self.mask().to(x.dtype), self.linear.bias)

    def finish(self, n_drop: torch.Tensor | None = None) -> nn.Linear:
        """Apply the hard mask to the weight and return the plain linear layer. `n_drop` (one count
        per row, from `project.project_counts`) replaces the learned ⌊s·cols⌋ when given."""
        with torch.no_grad():
            if n_drop is None:
                keep = self.mask().detach().round()
            else:
                ranks = torch.arange(self.cols, device=self.theta.device).unsqueeze(0)
                keep = (ranks >= n_drop.to(ranks.device).unsqueeze(1)).float().gather(1, self.rank_of_col)
            self.linear.weight.mul_(keep.to(self.linear.weight.dtype))
        return self.linear

    def hard_sparsity(self) -> torch.Tensor:
        """Per row, the fraction ⌊s·cols⌋/cols the learned hard mask drops."""
        return torch.floor(self.row_sparsity().detach() * self.cols + 1e-6) / self.cols


def block_sparsity(layers: list[BesaLinear]) -> torch.Tensor:
    """Parameter-weighted mean sparsity of the block's linear layers (differentiable)."""
    num = sum(l.row_sparsity().sum() * l.cols for l in layers)
    return num / sum(l.linear.weight.numel() for l in layers)


def output_error(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Squared error normalised per output channel by the reference's norm over the tokens."""
    scale = ref.float().reshape(-1, ref.shape[-1]).norm(dim=0).clamp_min(1e-8)
    return ((out.float() - ref.float()) / scale).pow(2).sum() / ref.shape[-1]


def besa_loss(out, ref, layers, target: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    s = block_sparsity(layers)
    return output_error(out, ref) + lam * ((s - target) / target) ** 2, s
