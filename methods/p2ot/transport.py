"""Progressive partial optimal transport: the pseudo-labelling problem and its scaling solver.

P²OT (Zhang, Ren, He, ICLR 2024, Sec. 3) labels N samples with K clusters by

    min_Q ⟨Q, C⟩ + λ·KL(Qᵀ1 ‖ (ρ/K)·1)   s.t.  Q ≥ 0,  Q1 ≤ 1/N,  1ᵀQ1 = ρ,

C = −log softmax(logits), KL(x‖y) = Σ x log(x/y) − x + y. Only a mass ρ moves (the samples
the head is most sure of); the cluster sizes are tied to uniform only by the KL term.
A virtual cluster ξ takes the mass 1 − ρ that is not moved, which turns the row
inequality into an equality: Q̂ = [Q, ξ] (N, K+1), Ĉ = [C, 0], Q̂1 = 1/N, 1ᵀξ = 1 − ρ, the KL
acting on the K real columns only. With the entropy ε·Σ Q̂ log Q̂ this is an unbalanced OT
problem that generalised Sinkhorn iterations solve (Chizat et al. 2018): the hard rows and
the hard virtual column are plain scalings, the soft real columns a scaling raised to the
power λ/(λ+ε).
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
import torch

# exp(-x) underflows float64 below about x = 745; keep well inside that range
MAX_COST_RANGE_OVER_EPSILON = 700.0


class AugmentedSolution(NamedTuple):
    plan: torch.Tensor   # (N, K+1) float64: Q̂ = [Q, ξ]
    iterations: int      # scaling iterations run
    row_error: float     # max_i |N·(Q̂1)_i − 1| at the returned plan
    scaling: torch.Tensor  # (K+1,) the column scaling b, to warm-start a later solve


def check_problem(cost: torch.Tensor, rho: float, epsilon: float, kl_weight: float) -> None:
    """ValueError, in one sentence naming the value, for input the problem is not defined on."""
    if cost.dim() != 2:
        raise ValueError(f"cost must be 2-D (N samples, K clusters), got shape {tuple(cost.shape)}")
    if cost.shape[0] == 0 or cost.shape[1] == 0:
        raise ValueError(f"cost must have at least one sample and one cluster, got shape {tuple(cost.shape)}")
    if not torch.isfinite(cost).all():
        bad = int((~torch.isfinite(cost)).sum())
        raise ValueError(f"cost has {bad} NaN/inf entries of {cost.numel()}")
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho (the transported mass) must be in (0, 1], got {rho}")
    if not epsilon > 0.0:
        raise ValueError(f"epsilon (the entropic weight) must be > 0, got {epsilon}")
    if not kl_weight > 0.0:
        raise ValueError(f"kl_weight (lambda) must be > 0 (math.inf for the hard marginal), got {kl_weight}")


def solve_augmented(cost: torch.Tensor, rho: float, epsilon: float, kl_weight: float,
                    max_iter: int = 1000, tol: float = 1e-6, warn: bool = True,
                    init_scaling: torch.Tensor | None = None, relax: bool = True) -> AugmentedSolution:
    """The scaling iterations on the augmented problem; returns Q̂ = [Q, ξ] and how it stopped.

    cost: (N, K). M = exp(−Ĉ/ε) (N, K+1), α = 1/N, β = [ρ/K·1_K; 1 − ρ], b = 1; repeat
    a = α/(Mb); b = β/(Mᵀa); b[:K] ← b[:K]^{λ/(λ+ε)} until max_i |N·(a⊙Mb)_i − 1| < tol or
    max_iter. The real columns of C are shifted by min(C) first: the real mass is fixed at ρ,
    so a common shift changes the objective by a constant; a per-row shift would not (it
    would change which samples go to the virtual column). A solve that stops at max_iter
    warns once with its row error (unless warn=False: the caller reads `row_error`).
    `init_scaling` (K+1,) starts b from an earlier solve's `scaling` instead of 1 (the official
    code's warm start across views and steps): fewer iterations, the same fixed point.
    relax: over-relax the scaling once the rate is known (`_scale`): the same fixed point and
    stopping guarantee (rows within tol; columns within tol too), fewer iterations.
    """
    check_problem(cost, rho, epsilon, kl_weight)
    if max_iter < 1 or not tol > 0:
        raise ValueError(f"max_iter must be >= 1 and tol > 0, got max_iter={max_iter}, tol={tol}")
    n, k = cost.shape
    c = cost.detach().to(torch.float64)
    c = c - c.min()
    span = float(c.max())
    if span / epsilon > MAX_COST_RANGE_OVER_EPSILON:
        raise ValueError(f"cost range / epsilon = {span:.4g} / {epsilon:.4g} = {span / epsilon:.4g} exceeds "
                         f"{MAX_COST_RANGE_OVER_EPSILON:.0f}: exp(-cost/epsilon) underflows float64; "
                         f"raise epsilon or rescale the cost")
    kernel = np.exp(c.numpy() / -epsilon)                                           # M's real columns (N, K);
    alpha = 1.0 / n                                                                # the virtual one is all ones
    beta = np.full(k + 1, rho / k)
    beta[k] = 1.0 - rho                                                            # β: (K+1,)
    power = 1.0 if math.isinf(kl_weight) else kl_weight / (kl_weight + epsilon)
    if init_scaling is None:
        b = np.ones(k + 1)
    elif init_scaling.shape != (k + 1,) or not (torch.isfinite(init_scaling).all() and (init_scaling >= 0).all()):
        raise ValueError(f"init_scaling must be finite, >= 0 and of shape ({k + 1},), "
                         f"got shape {tuple(init_scaling.shape)}")
    else:
        b = init_scaling.detach().to(torch.float64).cpu().numpy().copy()
        if rho < 1:  # a previous ρ = 1 solve leaves b_virtual = 0, which the scaling could not undo
            b[k] = max(b[k], 1e-300)
    a, b, iterations, row_error = _scale(kernel, alpha, beta, b, power, max_iter, tol, relax)
    plan = np.empty((n, k + 1))
    np.multiply(kernel, a[:, None] * b[None, :k], out=plan[:, :k])
    plan[:, k] = a * b[k]
    if warn and row_error >= tol:
        warnings.warn(f"P2OT scaling stopped at max_iter={max_iter} with row error {row_error:.3g} "
                      f"(tol {tol:.3g}); rho={rho}, epsilon={epsilon}, kl_weight={kl_weight}",
                      RuntimeWarning, stacklevel=2)
    return AugmentedSolution(torch.from_numpy(plan), iterations, row_error, torch.from_numpy(b))


# rows per block of the fused sweep: a block of M (about 1 MiB) is read from memory once and used twice
BLOCK_BYTES = 1 << 20
# over-relaxation: plain iterations before the rate is estimated, the window it is estimated on,
# and the largest relaxation used
RELAX_AFTER, RATE_WINDOW, MAX_OMEGA, DIVERGED = 20, 10, 1.9, 100.0


def relaxation(errors: list[float], omega: float = 1.0) -> float:
    """ω for over-relaxed scaling from the last row errors: their contraction μ = (e_t / e_{t−w})^{1/w}
    over w = RATE_WINDOW iterations run at relaxation `omega` gives the rate η of plain scaling by
    Young's relation for 2-cyclic iterations, (μ + ω − 1)² = ω² η μ (η = μ at ω = 1), and
    ω = 2 / (1 + √(1 − η)) is the optimum for that rate (Young; Lehmann et al. 2022 for Sinkhorn),
    capped at MAX_OMEGA; 1 (plain) when the errors do not contract."""
    if len(errors) <= RATE_WINDOW or not errors[-1] > 0 or not errors[-1 - RATE_WINDOW] > 0:
        return 1.0
    mu = (errors[-1] / errors[-1 - RATE_WINDOW]) ** (1.0 / RATE_WINDOW)
    if not 0.0 < mu < 1.0:
        return 1.0
    eta = min(1.0, (mu + omega - 1.0) ** 2 / (omega ** 2 * mu))
    return min(MAX_OMEGA, 2.0 / (1.0 + math.sqrt(1.0 - eta)))


def _scale(kernel: np.ndarray, alpha: float, beta: np.ndarray, b: np.ndarray, power: float,
           max_iter: int, tol: float, relax: bool = True) -> tuple[np.ndarray, np.ndarray, int, float]:
    """The scaling loop a = α/(Mb); b = β/(Mᵀa); b[:K] ← b[:K]^power in numpy, float64, with
    M = [kernel, 1] (the virtual column of ones is never stored: (Mb)_i = (kernel b_K)_i + b_virtual,
    (Mᵀa)_virtual = Σ a). One sweep over the row blocks of the kernel computes, per block,
    Mb (the row error of the current (a, b) and the next a) and then that block's share of
    Mᵀa while the block is still in cache: one pass over M per iteration instead of two, the
    same operations as the two matrix-vector products (up to the order of the column sums).

    relax: after RELAX_AFTER plain iterations, each update is over-relaxed in the log domain,
    a ← a^{1−ω}(α/(Mb))^ω, b ← b^{1−ω}(b-step)^ω, with ω from the observed rate (`relaxation`;
    back to ω = 1 for good if the row error exceeds DIVERGED times its best or is not finite). The fixed point is
    the same; the columns are then no longer exact after each b-step, so the stop also asks
    max_j |b_j / (b-step)_j − 1| < tol (0 without relaxation: the columns are exact, or at their
    KL prox). Returns the last (a, b) pair, the pairs computed, and its row error
    max_i |N·a_i(Mb)_i − 1|."""
    n, k = kernel.shape
    rows = max(1, min(n, BLOCK_BYTES // (8 * k)))
    blocks = [(i, min(n, i + rows)) for i in range(0, n, rows)]
    a, a_next = None, np.empty(n)
    mta = np.empty(k)
    real_b = beta > 0                                                               # β_virtual = 0 when ρ = 1
    iterations, row_error, col_error, omega = 0, math.inf, 0.0, 1.0
    errors, diverged = [], False
    while True:
        mta[:] = 0.0
        error = 0.0
        b_real, b_virtual = b[:k], b[k]
        for lo, hi in blocks:
            block = kernel[lo:hi]
            kb = block @ b_real
            kb += b_virtual                                                        # (Mb) on the block's rows
            if a is not None:
                error = max(error, float(np.abs((n * a[lo:hi]) * kb - 1.0).max()))
            out = a_next[lo:hi]
            np.divide(alpha, kb, out=out)
            if omega != 1.0:                                                       # a^{1−ω} x^ω = a (x/a)^ω
                out /= a[lo:hi]
                out **= omega
                out *= a[lo:hi]
            mta += out @ block                                                     # the block's share of Mᵀa
        if a is not None:
            row_error = error
            if (row_error < tol and col_error < tol) or iterations >= max_iter:
                return a, b, iterations, row_error
            errors.append(row_error)
            if relax and iterations >= RELAX_AFTER and iterations % RATE_WINDOW == 0 and not diverged:
                omega = max(omega, relaxation(errors, omega))                      # (re-)estimated, never lowered
            if omega != 1.0 and not row_error < DIVERGED * min(errors):
                omega, diverged = 1.0, True                                        # diverging: plain from here on
        a, a_next = a_next, (a if a is not None else np.empty(n))
        step = np.empty(k + 1)
        np.divide(beta[:k], mta, out=step[:k])
        if power != 1.0:
            step[:k] **= power
        step[k] = beta[k] / a.sum()
        if omega != 1.0:
            new = np.where(real_b, b * (step / np.where(real_b, b, 1.0)) ** omega, 0.0)
            col_error = float(np.abs(new[real_b] / step[real_b] - 1.0).max())
        else:
            new, col_error = step, 0.0
        b = new
        iterations += 1


def solve_p2ot(cost: torch.Tensor, rho: float, epsilon: float, kl_weight: float,
               max_iter: int = 1000, tol: float = 1e-6) -> torch.Tensor:
    """The P²OT plan Q (N, K), float64: Q ≥ 0, Q1 ≤ 1/N, 1ᵀQ1 = ρ, column sums pulled to ρ/K
    with weight λ = `kl_weight` (math.inf: equal to ρ/K). ρ = 1, λ = ∞ is balanced entropic
    OT (SeLa); ρ = 1, finite λ is semi-relaxed unbalanced OT (UOT)."""
    return solve_augmented(cost, rho, epsilon, kl_weight, max_iter, tol).plan[:, :-1]


@torch.no_grad()
def pseudo_labels(logits: torch.Tensor, rho: float, epsilon: float, kl_weight: float,
                  max_iter: int = 1000, tol: float = 1e-6) -> torch.Tensor:
    """Y = N·Q for C = −log softmax(logits) (N, K); row i sums to sample i's transported
    mass (≤ 1). Returned in the logits' dtype, without grad."""
    return (logits.shape[0] * solve_p2ot(logit_cost(logits), rho, epsilon, kl_weight, max_iter, tol)).to(logits.dtype)


def logit_cost(logits: torch.Tensor) -> torch.Tensor:
    """C = −log softmax(logits) (N, K) in float64, after checking the logits."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D (N samples, K clusters), got shape {tuple(logits.shape)}")
    if not torch.isfinite(logits).all():
        bad = int((~torch.isfinite(logits)).sum())
        raise ValueError(f"logits have {bad} NaN/inf entries of {logits.numel()}")
    return -torch.log_softmax(logits.detach().to(torch.float64), dim=1)


def p2ot_objective(plan: torch.Tensor, cost: torch.Tensor, rho: float, epsilon: float,
                   kl_weight: float) -> float:
    """⟨Q, C⟩ + λ·KL(Qᵀ1 ‖ ρ/K) + ε·Σ Q̂ log Q̂ of an augmented plan Q̂ (N, K+1); λ = ∞
    drops the KL term (the marginal is then a constraint). For tests and benchmarks."""
    k = cost.shape[1]
    q = plan[:, :k]
    value = float((q * cost.to(plan.dtype)).sum())
    if not math.isinf(kl_weight):
        col, target = q.sum(0), rho / k
        value += kl_weight * float((col * torch.log(col / target) - col + target).sum())
    return value + epsilon * float(torch.special.xlogy(plan, plan).sum())


def rho_schedule(step: int, total_steps: int, rho_start: float = 0.1, rho_end: float = 1.0,
                 kind: str = "sigmoid") -> float:
    """The transported mass at `step` (P²OT Sec. 3, the mass ramp):
    sigmoid: ρ₀ + (ρ₁ − ρ₀)·exp(−5(1 − t/T)²) (Laine & Aila's ramp-up), linear: ρ₀ + (ρ₁ − ρ₀)·t/T,
    t clipped to [0, T]; T = 0 gives ρ₁."""
    for name, value in (("rho_start", rho_start), ("rho_end", rho_end)):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{name} must be in (0, 1], got {value}")
    if total_steps < 0:
        raise ValueError(f"total_steps must be >= 0, got {total_steps}")
    if kind not in ("sigmoid", "linear"):
        raise ValueError(f"kind must be 'sigmoid' or 'linear', got '{kind}'")
    if total_steps == 0:
        return float(rho_end)
    t = min(max(step, 0), total_steps) / total_steps
    ramp = math.exp(-5.0 * (1.0 - t) ** 2) if kind == "sigmoid" else t
    return float(rho_start + (rho_end - rho_start) * ramp)
