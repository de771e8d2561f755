"""The in-context procedures every row is scored with (issue #49): the Bayes-optimal posterior
mean (ridge on Φ*(x) with λ = σ²D), ridge on raw x and on [x, 1] with λ chosen on validation
prompts, the prefix mean. Every procedure predicts y_i from (x_t, y_t), t < i, and x_i."""
from __future__ import annotations

import torch

from common.icl.predictions import ridge_predictions
from common.icl.prompts import check_prompts
from methods.icl_repr.representation import RandomRepresentation, check_noise_std


def bayes_predictions(xs: torch.Tensor, ys: torch.Tensor, rep: RandomRepresentation, noise_std: float) -> torch.Tensor:
    """The posterior mean of y_i given the prefix, for w ~ N(0, I_D / D) and noise N(0, σ²): ridge on
    Φ*(x) with λ = σ²D (σ = 0: minimum-norm least squares, the posterior mean's limit): (B, k)."""
    check_prompts(xs, ys)
    check_noise_std(noise_std)
    return ridge_predictions(rep.rep(xs.double()), ys, float(noise_std) ** 2 * rep.rep_dim)


def affine_features(xs: torch.Tensor) -> torch.Tensor:
    """[x, 1]: (..., d + 1) (ridge with an intercept, penalised like the slopes)."""
    return torch.cat([xs, xs.new_ones(*xs.shape[:-1], 1)], dim=-1)


def prefix_mean_predictions(ys: torch.Tensor) -> torch.Tensor:
    """ŷ_i = mean of y_0..y_{i−1}, 0 at i = 0: (B, k)."""
    if ys.dim() != 2:
        raise ValueError(f"ys must have shape (B, k), got {tuple(ys.shape)}")
    sums = torch.cumsum(ys.double(), dim=1)
    out = torch.zeros_like(sums)
    counts = torch.arange(1, ys.shape[1], dtype=sums.dtype)
    out[:, 1:] = sums[:, :-1] / counts
    return out.to(ys.dtype)


def risk_curve(predictions: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """E_b (ŷ_bi − y_bi)² at every position i (k,), in float64."""
    return (predictions.double() - ys.double()).square().mean(0)


def risks(predictions: torch.Tensor, ys: torch.Tensor) -> dict[str, float]:
    """risk: the mean of the curve over positions 1..k−1; risk_late over k/2..k−1."""
    curve = risk_curve(predictions, ys)
    k = curve.shape[0]
    if k < 2:
        raise ValueError(f"risks need prompts of length >= 2, got {k}")
    return {"risk": float(curve[1:].mean()), "risk_late": float(curve[k // 2:].mean())}


def choose_lambda(features: torch.Tensor, ys: torch.Tensor, lambdas) -> float:
    """The λ of `lambdas` whose ridge predictions have the least risk_late on these (validation)
    prompts; the first on ties."""
    lambdas = [float(lam) for lam in lambdas]
    if not lambdas:
        raise ValueError("choose_lambda needs at least one λ")
    scores = [risks(ridge_predictions(features, ys, lam), ys)["risk_late"] for lam in lambdas]
    return lambdas[min(range(len(lambdas)), key=scores.__getitem__)]
