"""Intra-Fusion's optimal-transport fusion of one group of n coupled neurons into k
(Theus et al., ICLR 2024, "Towards Meta-Pruning via Optimal Transport", Section 3.2 and
Algorithm 2), as pure functions of tensors.

Shapes: n neurons before, k = round(n(1−s)) after; an incoming weight is (n, …) (rows of the
layer that produces the neurons, its bias (n,)); an outgoing weight is (m, n, …) (columns of
the layer that consumes them). A plan P is (n, k), float64, its row sums the source masses μ
and its column sums the target masses ν.
"""
from __future__ import annotations

import math

import numpy as np
import ot
import torch

MASSES = ("uniform", "importance")
NORMALIZATIONS = ("mean", "official")


def check_sparsity(sparsity: float) -> None:
    if not 0 <= sparsity < 1:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")


def kept_count(n: int, sparsity: float) -> int:
    """k = round(n(1−sparsity)), at least 1 (halves round up: 2.5 -> 3)."""
    check_sparsity(sparsity)
    return max(1, min(n, math.floor(n * (1 - sparsity) + 0.5)))


def keep_indices(importance: torch.Tensor, sparsity: float) -> torch.Tensor:
    """The k most important neurons in index order; ties keep the lower index. (n,) -> (k,) int64."""
    k = kept_count(len(importance), sparsity)
    order = torch.argsort(-importance.detach().double().cpu(), stable=True)
    return order[:k].sort().values


def neuron_cost(features: torch.Tensor, keep: torch.Tensor, p: float = 1.0) -> torch.Tensor:
    """C[a, e] = ‖f_a/‖f_a‖₂ − f_keep(e)/‖f_keep(e)‖₂‖_p (Section 3.2.2: the normalised ℓ_p distance).

    features: (n, F), row a the group's incoming rows and outgoing columns of neuron a
    concatenated; keep: (k,). Returns (n, k) float64. A zero row stays zero (no division by 0).
    """
    if p <= 0:
        raise ValueError(f"p must be positive, got {p}")
    f = features.detach().double()
    f = f / f.norm(dim=1, keepdim=True).clamp_min(torch.finfo(f.dtype).tiny)
    return torch.cdist(f, f[keep], p=p)


def masses(kind: str, importance: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Source (keep=None, n entries) or target (k entries) masses (Section 3.2.3), summing to 1:
    'uniform' 1/n, or 'importance' s_a / Σ s."""
    if kind not in MASSES:
        raise ValueError(f"mass must be one of {MASSES}, got '{kind}'")
    s = importance.detach().double().cpu()
    if keep is not None:
        s = s[keep]
    if kind == "uniform":
        return torch.full((len(s),), 1.0 / len(s), dtype=torch.float64)
    if (s < 0).any() or s.sum() <= 0:
        raise ValueError("importance masses need non-negative scores with a positive sum")
    return s / s.sum()


def transport_plan(cost: torch.Tensor, source_mass: torch.Tensor, target_mass: torch.Tensor,
                   reg: float | None = None) -> torch.Tensor:
    """P = argmin_{P ≥ 0, P1 = μ, Pᵀ1 = ν} ⟨P, C⟩ (the OT problem of Section 2.2), exact by
    POT's network simplex (`ot.emd`), or entropic (`ot.sinkhorn`) when `reg` is
    given — as a fraction of the mean cost, so that it does not depend on the cost's scale.

    cost: (n, k); source_mass: (n,); target_mass: (k,) — both normalised to sum to 1 here.
    Returns (n, k) float64.
    """
    if cost.dim() != 2:
        raise ValueError(f"cost must be a matrix (n, k), got shape {tuple(cost.shape)}")
    n, k = cost.shape
    mu = torch.as_tensor(source_mass, dtype=torch.float64).flatten()
    nu = torch.as_tensor(target_mass, dtype=torch.float64).flatten()
    if len(mu) != n or len(nu) != k:
        raise ValueError(f"masses of lengths ({len(mu)}, {len(nu)}) do not fit a cost of shape ({n}, {k})")
    if (mu < 0).any() or (nu < 0).any() or mu.sum() <= 0 or nu.sum() <= 0:
        raise ValueError("masses must be non-negative with a positive sum")
    a, b = (mu / mu.sum()).numpy(), (nu / nu.sum()).numpy()
    c = np.ascontiguousarray(cost.detach().double().cpu().numpy())
    if reg is None:
        plan = ot.emd(a, b, c, numItermax=10_000_000)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            plan = ot.sinkhorn(a, b, c, reg * float(c.mean()), numItermax=100_000)
        if not np.isfinite(plan).all() or abs(plan.sum() - 1) > 1e-3:   # exp(−C/reg) underflowed
            raise ValueError(f"Sinkhorn with reg={reg} (× mean cost) underflowed; use a larger reg or the exact plan")
    return torch.from_numpy(np.asarray(plan, dtype=np.float64))


def _check_plan(plan: torch.Tensor, n: int, what: str) -> None:
    if plan.dim() != 2 or plan.shape[0] != n:
        raise ValueError(f"plan of shape {tuple(plan.shape)} does not fit {what} with {n} neurons")


def _safe_inverse(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, 1.0 / x.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


def merge_incoming(plan: torch.Tensor, w: torch.Tensor, normalization: str = "mean") -> torch.Tensor:
    """Fused rows of the layer producing the neurons (or its bias): (n, …) -> (k, …).

    'mean': W_new = diag(1/ν) Pᵀ W, the mass-weighted mean of the neurons sent to e.
    'official': W_new = (P diag(1/μ))ᵀ W, Algorithm 2's T = diag(1/μ)Tᵀ as the official code
    computes it — rows come out ν_e/μ_a (n/k for uniform masses) times larger.
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got '{normalization}'")
    _check_plan(plan, w.shape[0], "an incoming weight")
    plan = plan.double()
    if normalization == "mean":
        coef = plan * _safe_inverse(plan.sum(0))[None, :]   # (n, k), columns sum to 1
    else:
        coef = plan * _safe_inverse(plan.sum(1))[:, None]   # (n, k), rows sum to 1
    return torch.einsum("ne,n...->e...", coef, w.double()).to(w.dtype)


def merge_outgoing(plan: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Fused columns of the layer consuming the neurons: (m, n, …) -> (m, k, …),
    W'_new = W' diag(1/μ) P: each neuron's outgoing weights split by the share of its mass
    sent to e (a neuron with μ_a = 0 adds nothing)."""
    _check_plan(plan, w.shape[1], "an outgoing weight")
    plan = plan.double()
    coef = plan * _safe_inverse(plan.sum(1))[:, None]        # (n, k), rows sum to 1
    return torch.einsum("ne,mn...->me...", coef, w.double()).to(w.dtype)


def merge(plan: torch.Tensor, w_in: torch.Tensor, b_in: torch.Tensor | None, w_out: torch.Tensor,
          normalization: str = "mean"):
    """One layer pair fused by `plan` (n, k): w_in (n, …), b_in (n,) or None, w_out (m, n, …)
    -> (w_in (k, …), b_in (k,) or None, w_out (m, k, …))."""
    new_b = None if b_in is None else merge_incoming(plan, b_in, normalization)
    return merge_incoming(plan, w_in, normalization), new_b, merge_outgoing(plan, w_out)


def fuse_layer(w_in: torch.Tensor, b_in: torch.Tensor | None, w_out: torch.Tensor, importance: torch.Tensor,
               sparsity: float, source_mass: str = "uniform", target_mass: str = "uniform", p: float = 1.0,
               normalization: str = "mean"):
    """Intra-Fusion of one layer pair (Algorithm 2 with the k most important neurons as target).

    w_in (n, …), b_in (n,) or None, w_out (m, n, …), importance (n,) ->
    (w_in (k, …), b_in (k,) or None, w_out (m, k, …), keep (k,)). The neuron features are the
    weights only (rows of w_in, columns of w_out), as in the official code.
    """
    n = w_in.shape[0]
    if w_out.dim() < 2 or w_out.shape[1] != n or len(importance) != n or (b_in is not None and len(b_in) != n):
        raise ValueError(f"w_in has {n} neurons but w_out {tuple(w_out.shape)}, importance "
                         f"{tuple(importance.shape)} and b_in {None if b_in is None else tuple(b_in.shape)} disagree")
    keep = keep_indices(importance, sparsity)
    features = torch.cat([w_in.reshape(n, -1), w_out.transpose(0, 1).reshape(n, -1)], dim=1)
    plan = transport_plan(neuron_cost(features, keep, p), masses(source_mass, importance),
                          masses(target_mass, importance, keep))
    return (*merge(plan, w_in, b_in, w_out, normalization), keep)
