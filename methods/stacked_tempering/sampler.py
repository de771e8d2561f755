"""The samplers: plain Gibbs, Stacked Tempering (issue #53; official src/swap.jl and
src/stacked_tempering.jl) and parallel tempering (the baseline).

Stacked Tempering runs one chain per RBM of a stack (RBM l+1 trained on RBM l's hidden
representations) and proposes to exchange RBM l's hidden state h_l with RBM l+1's visible state
v_{l+1}; both live in {0,1}^{M_l}. The swap is a Metropolis move on the law with v_l and h_{l+1}
summed out, so its cost is a difference of free energies (official `swap_energy`):

    dE = [F_h^l(v_{l+1}) - F_h^l(h_l)] + [F_v^{l+1}(h_l) - F_v^{l+1}(v_{l+1})],  accept w.p. min(1, e^{-dE}),

after which v_l ~ p_l(v | h_l) and h_{l+1} ~ p_{l+1}(h | v_{l+1}) are redrawn (the summed-out units).
The target is the product over layers of p_l(v_l, h_l): the bottom chain samples RBM 1 exactly.
Layer lists are 0-based here; `step` counts from 1 as in the official loop (`for t in 1:nsteps`).
"""
from __future__ import annotations

import torch

from methods.stacked_tempering.rbm import BinaryRBM, check_binary, check_stack


def _uniform(shape, generator, dtype=torch.float32) -> torch.Tensor:
    return torch.rand(shape, generator=generator, dtype=dtype)


def gibbs_step(rbm: BinaryRBM, v: torch.Tensor, generator: torch.Generator | None = None,
               beta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One Gibbs sweep: h ~ p(h | v), then v ~ p(v | h). Returns (v, h)."""
    h = rbm.sample_h(v, generator, beta)
    return rbm.sample_v(h, generator, beta), h


def swap_log_acceptance(lower: BinaryRBM, h_lower: torch.Tensor, upper: BinaryRBM,
                        v_upper: torch.Tensor) -> torch.Tensor:
    """-dE of exchanging `h_lower` (RBM l's hidden) with `v_upper` (RBM l+1's visible), per chain (B,).
    The official `swap_energy` is dE; a swap is accepted with probability min(1, exp(-dE))."""
    if lower.num_hidden != upper.num_visible:
        raise ValueError(f"lower RBM has {lower.num_hidden} hidden units, upper RBM {upper.num_visible} visible")
    d1 = lower.free_energy_h(v_upper) - lower.free_energy_h(h_lower)
    d2 = upper.free_energy_v(h_lower) - upper.free_energy_v(v_upper)
    return -(d1 + d2)


def metropolis_accept(log_acceptance: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Bool (B,): u < exp(log_acceptance) with u ~ U(0, 1), i.e. accepted w.p. min(1, exp(log_acc))."""
    u = _uniform(log_acceptance.shape, generator, log_acceptance.dtype)
    return torch.log(u) < log_acceptance


def init_stack(rbms, v0: torch.Tensor, generator: torch.Generator | None = None):
    """Official `sample_stack`: h_l drawn bottom-up from v0 (h_0 ~ p_0(h | v0), h_l ~ p_l(h | h_{l-1})),
    then v_l ~ p_l(v | h_l) and h_l ~ p_l(h | v_l). Returns (vs, hs), lists over layers of (B, .)."""
    check_stack(rbms)
    check_binary(v0, "v0")
    hs, x = [], v0
    for rbm in rbms:
        x = rbm.sample_h(x, generator)
        hs.append(x)
    vs = [rbm.sample_v(h, generator) for rbm, h in zip(rbms, hs)]
    hs = [rbm.sample_h(v, generator) for rbm, v in zip(rbms, vs)]
    return vs, hs


def stacked_tempering_step(rbms, vs, hs, step: int, generator: torch.Generator | None = None,
                           stats: dict | None = None):
    """Step `step` (>= 1) of the official loop. Odd steps try pairs (0, 1), (2, 3), ...; even steps
    (1, 2), (3, 4), ... (layer 0 left as it is). After each pair, every chain redraws
    v_l ~ p_l(v | h_l) and h_{l+1} ~ p_{l+1}(h | v_{l+1}); a top RBM left out of the pairs redraws
    v ~ p(v | h). Then every layer: h ~ p(h | v), v ~ p(v | h). Returns new lists (vs, hs).
    `stats` (optional) accumulates `accepted[l]` and `tried[l]` per pair (l, l+1)."""
    check_stack(rbms)
    if len(vs) != len(rbms) or len(hs) != len(rbms):
        raise ValueError(f"{len(rbms)} RBMs but {len(vs)} visible and {len(hs)} hidden states")
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    for i, (v, h) in enumerate(zip(vs, hs)):
        check_binary(v, f"vs[{i}]")
        check_binary(h, f"hs[{i}]")
    vs, hs = list(vs), list(hs)
    num = len(rbms)
    first = 0 if step % 2 == 1 else 1
    for l in range(first, num, 2):
        if l + 1 < num:
            lower, upper = rbms[l], rbms[l + 1]
            accept = metropolis_accept(swap_log_acceptance(lower, hs[l], upper, vs[l + 1]), generator)
            a = accept.unsqueeze(-1)
            hs[l], vs[l + 1] = torch.where(a, vs[l + 1], hs[l]), torch.where(a, hs[l], vs[l + 1])
            vs[l] = lower.sample_v(hs[l], generator)
            hs[l + 1] = upper.sample_h(vs[l + 1], generator)
            if stats is not None:
                stats.setdefault("accepted", [0.0] * (num - 1))
                stats.setdefault("tried", [0.0] * (num - 1))
                stats["accepted"][l] += float(accept.sum())
                stats["tried"][l] += float(accept.numel())
        else:                                   # the top RBM, left out of the pairs
            vs[l] = rbms[l].sample_v(hs[l], generator)
    hs = [rbm.sample_h(v, generator) for rbm, v in zip(rbms, vs)]
    vs = [rbm.sample_v(h, generator) for rbm, h in zip(rbms, hs)]
    return vs, hs


def check_betas(betas) -> list[float]:
    """ValueError unless the ladder starts at 1 and strictly decreases (and stays >= 0)."""
    betas = [float(b) for b in betas]
    if not betas or betas[0] != 1.0:
        raise ValueError(f"the beta ladder must start at 1 (the target), got {betas}")
    if any(b1 <= b2 for b1, b2 in zip(betas[:-1], betas[1:])):
        raise ValueError(f"the beta ladder must strictly decrease, got {betas}")
    if betas[-1] < 0:
        raise ValueError(f"inverse temperatures must be >= 0, got {betas}")
    return betas


def linear_betas(num: int, beta_min: float) -> list[float]:
    """K inverse temperatures spaced linearly from 1 down to beta_min."""
    if num < 1:
        raise ValueError(f"parallel tempering needs at least one replica, got {num}")
    if num == 1:
        return [1.0]
    return [1.0 - (1.0 - beta_min) * k / (num - 1) for k in range(num)]


def pt_swap_log_acceptance(beta_i: float, beta_j: float, energy_i: torch.Tensor,
                           energy_j: torch.Tensor) -> torch.Tensor:
    """log of the acceptance of exchanging replicas i and j of p_beta ∝ exp(-beta E):
    (beta_i - beta_j) (E_i - E_j)."""
    return (beta_i - beta_j) * (energy_i - energy_j)


def parallel_tempering_step(rbm: BinaryRBM, betas, vs, hs, step: int, generator: torch.Generator | None = None,
                            stats: dict | None = None):
    """One Gibbs sweep per replica at its beta (h ~ p_beta(h | v), v ~ p_beta(v | h)), then exchanges
    of (v, h) between neighbours k, k+1: pairs (0, 1), (2, 3), ... on odd steps, (1, 2), ... on even
    ones, accepted w.p. min(1, exp((beta_k - beta_{k+1}) (E_k - E_{k+1}))). Returns (vs, hs)."""
    betas = check_betas(betas)
    if len(vs) != len(betas) or len(hs) != len(betas):
        raise ValueError(f"{len(betas)} temperatures but {len(vs)} visible and {len(hs)} hidden states")
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    for i, (v, h) in enumerate(zip(vs, hs)):
        check_binary(v, f"vs[{i}]")
        check_binary(h, f"hs[{i}]")
    vs, hs = list(vs), list(hs)
    for k, beta in enumerate(betas):
        hs[k] = rbm.sample_h(vs[k], generator, beta)
        vs[k] = rbm.sample_v(hs[k], generator, beta)
    energies = [rbm.energy(v, h) for v, h in zip(vs, hs)]
    for k in range(0 if step % 2 == 1 else 1, len(betas) - 1, 2):
        accept = metropolis_accept(pt_swap_log_acceptance(betas[k], betas[k + 1], energies[k], energies[k + 1]),
                                   generator)
        a = accept.unsqueeze(-1)
        vs[k], vs[k + 1] = torch.where(a, vs[k + 1], vs[k]), torch.where(a, vs[k], vs[k + 1])
        hs[k], hs[k + 1] = torch.where(a, hs[k + 1], hs[k]), torch.where(a, hs[k], hs[k + 1])
        if stats is not None:
            stats.setdefault("accepted", [0.0] * (len(betas) - 1))
            stats.setdefault("tried", [0.0] * (len(betas) - 1))
            stats["accepted"][k] += float(accept.sum())
            stats["tried"][k] += float(accept.numel())
    return vs, hs


def count_mode_jumps(labels: torch.Tensor) -> torch.Tensor:
    """Label changes along time per chain: labels (T, C) -> (C,) counts."""
    if labels.dim() != 2:
        raise ValueError(f"labels must be (T, C), got shape {tuple(labels.shape)}")
    return (labels[1:] != labels[:-1]).sum(0)


def stack_products(rbms, step: int) -> float:
    """The matrix-vector products of one `stacked_tempering_step` per chain, in units of N_l M_l (one
    product with RBM l's weights), counted as the step does them: per pair (l, l+1) the swap's
    F_h^l twice and F_v^{l+1} twice, then v_l ~ p_l(v | h_l) and h_{l+1} ~ p_{l+1}(h | v_{l+1}); a top
    RBM left out: v ~ p(v | h); then every layer's sweep, h ~ p(h | v) and v ~ p(v | h)."""
    check_stack(rbms)
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    p = [r.num_visible * r.num_hidden for r in rbms]
    total = 2.0 * sum(p)                               # the closing sweep of every layer
    for l in range(0 if step % 2 == 1 else 1, len(rbms), 2):
        total += 3.0 * (p[l] + p[l + 1]) if l + 1 < len(rbms) else p[l]
    return total


def stack_cost(rbms) -> float:
    """Cost of one stacked step relative to one Gibbs sweep of RBM 1 (2 N_1 M_1 products), every
    product counted (`stack_products`, the swaps' free energies included), averaged over the two
    parities of the step. For 784-20-20-10: about 1.75 (the flop ratio of the sweeps alone: 1.04)."""
    return (stack_products(rbms, 1) + stack_products(rbms, 2)) / 2 / (2.0 * rbms[0].num_visible * rbms[0].num_hidden)


def pt_cost(num_replicas: int) -> float:
    """Cost of one `parallel_tempering_step` relative to one Gibbs sweep: K sweeps (2 N M products
    each) and K energies for the exchanges (vᵀWh, N M each): 1.5 K."""
    if num_replicas < 1:
        raise ValueError(f"parallel tempering needs at least one replica, got {num_replicas}")
    return 1.5 * num_replicas
