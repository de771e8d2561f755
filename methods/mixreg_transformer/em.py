"""Batch EM for a discrete mixture of linear regressions with known Gaussian noise (the
paper's Algorithm 1): every prompt comes from one component; the mixing weights stay uniform."""
from __future__ import annotations

import torch
from einops import einsum

from methods.mixreg_transformer.mixture import check_components, check_noise_std, check_prompts, draw_components
from methods.mixreg_transformer.procedures import component_weights


def em_step(xs: torch.Tensor, ys: torch.Tensor, components: torch.Tensor, noise_std: float,
            gram: torch.Tensor, moment: torch.Tensor) -> torch.Tensor:
    """One E-step and M-step. xs (B, k, d), ys (B, k), components (m, d), gram = X_bᵀX_b
    (B, d, d), moment = X_bᵀy_b (B, d). Returns the new (m, d).

    E: γ_bj ∝ exp(−Σ_t r²_btj / 2σ²) with r_btj = y_bt − ⟨w_j, x_bt⟩.
    M: w_j = (Σ_b γ_bj X_bᵀX_b)⁻¹ Σ_b γ_bj X_bᵀy_b (pseudo-inverse: a component with too few
    examples gets the min-norm solution); a component with no weight keeps its estimate."""
    sq = (ys.unsqueeze(-1) - einsum(xs, components, "b k d, m d -> b k m")).square().sum(1)  # (B, m)
    gamma = component_weights(sq, noise_std)                                                  # (B, m)
    lhs = einsum(gamma, gram, "b m, b d e -> m d e")
    rhs = einsum(gamma, moment, "b m, b d -> m d")
    new = (torch.linalg.pinv(lhs, hermitian=True) @ rhs.unsqueeze(-1)).squeeze(-1)
    empty = gamma.sum(0) <= 1e-12 * len(gamma)
    return torch.where(empty.unsqueeze(-1), components, new)


def batch_em(xs: torch.Tensor, ys: torch.Tensor, num_components: int, noise_std: float, iters: int = 50,
             init: torch.Tensor | None = None, seed: int = 0, draw: str = "gaussian") -> torch.Tensor:
    """Estimates of the m components (m, d) from prompts xs (B, k, d), ys (B, k), in ys' dtype.
    `init` (m, d) defaults to m draws from the components' prior (`draw`: N(0, I_d) or the
    sphere of radius √d, `mixture.draw_components`) seeded by `seed`; computed in float64."""
    check_prompts(xs, ys)
    check_noise_std(noise_std)
    if num_components < 1 or iters < 0:
        raise ValueError(f"num_components must be >= 1 and iters >= 0, got {num_components} and {iters}")
    x, y = xs.double(), ys.double()
    if init is None:
        gen = torch.Generator().manual_seed(seed)
        w = draw_components(num_components, x.shape[-1], gen, draw)
    else:
        check_components(init, x.shape[-1])
        if len(init) != num_components:
            raise ValueError(f"init has {len(init)} rows but num_components is {num_components}")
        w = init.double().clone()
    gram = einsum(x, x, "b k d, b k e -> b d e")
    moment = einsum(x, y, "b k d, b k -> b d")
    for _ in range(iters):
        w = em_step(x, y, w, noise_std, gram, moment)
    return w.to(ys.dtype)
