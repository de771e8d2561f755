"""The in-context procedures: those that know the m components (the posterior mean,
Bayes-optimal for squared loss, the paper's displays 4-6; the argmin oracle), and those that
ignore the mixture (ridge, the posterior mean under one isotropic Gaussian prior on w; min-norm
least squares; the zero predictor).

Every procedure predicts y_i from the prefix (x_t, y_t), t < i, and x_i, at every position i.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import einsum

from common.icl.predictions import ols_predictions  # moved to common/icl (issue #49)
from common.icl.predictions import ridge_predictions as common_ridge_predictions  # the solve (issue #49)
from methods.mixreg_transformer.mixture import check_components, check_noise_std, check_prompts


def prefix_sq_residuals(xs: torch.Tensor, ys: torch.Tensor, components: torch.Tensor) -> torch.Tensor:
    """S_ij = Σ_{t<i} (y_t − ⟨w_j, x_t⟩)² (display 5, summed over the prefix): (B, k, m); S_0j = 0."""
    check_prompts(xs, ys)
    check_components(components, xs.shape[-1])
    residuals = ys.unsqueeze(-1) - einsum(xs, components.to(xs.dtype), "b k d, m d -> b k m")
    # an exclusive prefix sum (position i sees examples 0..i-1), not cumsum − r², which cancels
    return F.pad(residuals.square().cumsum(1), (0, 0, 1, 0))[:, :-1]


def component_weights(sq_residuals: torch.Tensor, noise_std: float) -> torch.Tensor:
    """softmax_j(−S_j / 2σ²) over the last axis (display 6), in log space: the least S is
    subtracted first, so the weights stay finite when every likelihood exp(−S/2σ²) underflows.
    σ = 0 is the limit: equal weight on the components that share the least S, 0 elsewhere."""
    check_noise_std(noise_std)
    gap = sq_residuals - sq_residuals.amin(-1, keepdim=True)   # >= 0, exactly 0 at the minima
    variance = float(noise_std) ** 2
    scale = 0.5 / variance if variance > 0 else math.inf
    if scale > torch.finfo(gap.dtype).max:                       # σ² too small for the dtype: the limit
        logits = torch.where(gap == 0, 0.0, -math.inf).to(gap.dtype)
    else:
        logits = -gap * scale                                   # 0 at the minima, so never all −inf
    return torch.softmax(logits, dim=-1)


def posterior_weights(xs: torch.Tensor, ys: torch.Tensor, components: torch.Tensor, noise_std: float) -> torch.Tensor:
    """p_ij = P(component j | prefix before i) under a uniform prior (display 6): (B, k, m);
    uniform at position 0."""
    return component_weights(prefix_sq_residuals(xs, ys, components), noise_std)


def _weighted_predictions(xs: torch.Tensor, weights: torch.Tensor, components: torch.Tensor) -> torch.Tensor:
    per_component = einsum(xs, components.to(xs.dtype), "b k d, m d -> b k m")
    return (weights * per_component).sum(-1)                   # (B, k)


def posterior_mean_predictions(xs: torch.Tensor, ys: torch.Tensor, components: torch.Tensor,
                               noise_std: float) -> torch.Tensor:
    """ŷ_i = Σ_j p_ij ⟨w_j, x_i⟩ (display 4): (B, k); position 0 gives the prior mean."""
    return _weighted_predictions(xs, posterior_weights(xs, ys, components, noise_std), components)


def argmin_predictions(xs: torch.Tensor, ys: torch.Tensor, components: torch.Tensor) -> torch.Tensor:
    """ŷ_i = ⟨w_ĵ, x_i⟩ with ĵ the least-residual component on the prefix (the oracle that knows
    the components): (B, k). Exact ties (position 0) share the weight, so this is the σ → 0
    limit of the posterior mean."""
    return posterior_mean_predictions(xs, ys, components, 0.0)


def ridge_predictions(xs: torch.Tensor, ys: torch.Tensor, noise_std: float, prior_var: float = 1.0) -> torch.Tensor:
    """ŷ_i = ⟨ŵ_i, x_i⟩ with ŵ_i = (XᵀX + λI)⁻¹Xᵀy on the prefix t < i, λ = σ² / τ²: the
    posterior mean of w under the single prior w ~ N(0, τ² I_d) and Gaussian noise, i.e. the
    Bayes predictor for a prior that ignores the mixture (τ² = prior_var = 1 matches the
    components' second moment E w wᵀ = I_d). 0 at i = 0 (the prior mean); σ = 0 is the λ → 0
    limit, min-norm least squares. The solve is `common.icl.ridge_predictions` on the raw x
    (float64): (B, k)."""
    check_prompts(xs, ys)
    check_noise_std(noise_std)
    if not prior_var > 0:
        raise ValueError(f"prior_var must be > 0, got {prior_var}")
    return common_ridge_predictions(xs, ys, float(noise_std) ** 2 / float(prior_var))


def zero_predictions(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """ŷ_i = 0 (the prior mean of y, which reads nothing of the prompt): (B, k)."""
    check_prompts(xs, ys)
    return torch.zeros_like(ys)
