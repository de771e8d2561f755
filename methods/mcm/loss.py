"""MCM's losses and anomaly score (Yin et al., ICLR 2024, section 3), as pure functions.

Equation numbers are not cited: no copy of the paper is on this machine, so the forms follow
the issue's spec and the official code (Model/Loss.py, Model/Score.py), which agree here.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def anomaly_score(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """s(x) = (1/K) Σ_k ‖x̂_k − x‖₂ (Euclidean, not squared, as Model/Score.py).
    x (B, d), x_hat (B, K, d) -> (B,); higher = more anomalous."""
    return (x_hat - x.unsqueeze(1)).norm(dim=-1).mean(dim=1)


def reconstruction_loss(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """L_rec = batch mean of (1/K) Σ_k ‖x̂_k − x‖₂ (Model/Loss.py: the score, averaged)."""
    return anomaly_score(x, x_hat).mean()


def diversity_scale(num_masks: int) -> float:
    """1 / |(K−1) ln(1/(K−1))|: brings the loss of K mutually orthogonal masks to K/(K−1)."""
    if num_masks < 3:
        raise ValueError(f"the diversity loss needs num_masks >= 3 (its scale is infinite or undefined at K = {num_masks}).")
    return 1.0 / abs((num_masks - 1) * math.log(1.0 / (num_masks - 1)))


def diversity_loss(masks: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """L_div = batch mean of scale · Σ_k log Σ_{l≠k} exp(cos(M_k, M_l) / τ).
    masks (B, K, d) -> scalar. Scale-invariant per mask (cosine); log-sum-exp for stability."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}.")
    k = masks.shape[1]
    scale = diversity_scale(k)
    unit = F.normalize(masks, dim=-1)
    sim = torch.einsum("bkd,bld->bkl", unit, unit) / temperature        # (B, K, K)
    off_diagonal = ~torch.eye(k, dtype=torch.bool, device=masks.device)
    sim = sim.masked_fill(~off_diagonal, float("-inf"))
    return scale * torch.logsumexp(sim, dim=-1).sum(dim=1).mean()


def mcm_loss(x: torch.Tensor, x_hat: torch.Tensor, masks: torch.Tensor, lambda_div: float = 5.0,
             temperature: float = 0.1) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """L = L_rec + λ · L_div; returns (L, {'rec', 'div'} detached). λ = 0 skips L_div."""
    rec = reconstruction_loss(x, x_hat)
    if lambda_div == 0:
        return rec, {"rec": rec.detach()}
    div = diversity_loss(masks, temperature)
    return rec + lambda_div * div, {"rec": rec.detach(), "div": div.detach()}
