"""Mode-jump measurement (issue #53, "Mode jumps" and "Metrics"): every sampler's chains start in
one mode; each sweep the bottom state is labelled (MNIST: a logistic-regression classifier of the two
digits applied to p(v | h); Ising: the sign of the magnetisation of p(v | h)), and a jump is a label
change of one chain. Metrics per sampler row:
  jumps           label changes per chain per 10^4 sweeps (mean over chains)
  jumps_per_cost  jumps / (cost of a sweep in RBM-1 Gibbs sweeps: sum_l N_l M_l / N_1 M_1 for ST, K for PT)
  swap_acc        acceptance of the bottom exchange (ST: RBM 1 <-> RBM 2; PT: beta_1 <-> beta_2)
  balance         |share of sweeps in the start mode - 1/2| over chains and sweeps
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from methods.stacked_tempering.sampler import (count_mode_jumps, gibbs_step, init_stack, linear_betas,
                                               parallel_tempering_step, stack_cost, stacked_tempering_step)

Labeller = Callable[[torch.Tensor], torch.Tensor]   # states (C, N) in [0, 1] -> labels (C,) int


def logistic_labeller(x: np.ndarray, y: np.ndarray, seed: int = 0) -> Labeller:
    """A logistic-regression classifier of the two modes fitted on (x, y); returns probs -> labels."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=1000, random_state=seed).fit(x, y)
    w = torch.as_tensor(clf.coef_[0], dtype=torch.float32)
    b = float(clf.intercept_[0])
    return lambda p: (p.to(torch.float32) @ w + b > 0).long()


def magnetisation_labeller(p: torch.Tensor) -> torch.Tensor:
    """Ising: 1 where the mean spin 2 p - 1 is positive (p: p(v = 1 | h), so no exact ties)."""
    return ((2 * p.to(torch.float32) - 1).mean(-1) > 0).long()


def summarise(labels: torch.Tensor, start_label: int, cost: float) -> dict[str, float]:
    """labels (T, C) -> jumps per chain per 10^4 sweeps, per cost, and the balance."""
    jumps = float(count_mode_jumps(labels).float().mean()) * 1e4 / max(len(labels) - 1, 1)
    share = float((labels == start_label).float().mean())
    return {"jumps": jumps, "jumps_per_cost": jumps / cost, "balance": abs(share - 0.5)}


def run_gibbs(rbm, v0, sweeps, labeller, generator) -> torch.Tensor:
    labels, v = [], v0
    with torch.no_grad():
        for _ in range(sweeps):
            v, h = gibbs_step(rbm, v, generator)
            labels.append(labeller(rbm.visible_probs(h)))
    return torch.stack(labels)


def run_pt(rbm, v0, sweeps, betas, labeller, generator) -> tuple[torch.Tensor, dict]:
    stats: dict = {}
    with torch.no_grad():
        vs = [v0.clone() for _ in betas]
        hs = [rbm.sample_h(v0, generator, b) for b in betas]
        labels = []
        for t in range(1, sweeps + 1):
            vs, hs = parallel_tempering_step(rbm, betas, vs, hs, t, generator, stats)
            labels.append(labeller(rbm.visible_probs(hs[0])))
    return torch.stack(labels), stats


def run_st(rbms, v0, sweeps, labellers, generator) -> tuple[list[torch.Tensor], dict]:
    """labellers[l] labels layer l's visible state (layer 0: on p(v | h) as for the other rows)."""
    stats: dict = {}
    per_layer: list[list[torch.Tensor]] = [[] for _ in labellers]
    with torch.no_grad():
        vs, hs = init_stack(rbms, v0, generator)
        for t in range(1, sweeps + 1):
            vs, hs = stacked_tempering_step(rbms, vs, hs, t, generator, stats)
            per_layer[0].append(labellers[0](rbms[0].visible_probs(hs[0])))
            for l in range(1, len(labellers)):
                per_layer[l].append(labellers[l](vs[l]))
    return [torch.stack(x) for x in per_layer], stats


def measure_all(samplers, rbm1, stacks: dict, v0, sweeps: int, labellers: list, start_label: int,
                pt_replicas: int, pt_beta_min: float, generator) -> dict[str, float]:
    """`<row>/<metric>` for every sampler in `samplers` (gibbs, pt, st, st_random); `stacks` maps
    st / st_random to their RBM lists."""
    out: dict[str, float] = {}
    for name in samplers:
        if name == "gibbs":
            out |= {f"gibbs/{k}": v for k, v in summarise(run_gibbs(rbm1, v0, sweeps, labellers[0], generator),
                                                          start_label, 1.0).items()}
        elif name == "pt":
            betas = linear_betas(pt_replicas, pt_beta_min)
            labels, stats = run_pt(rbm1, v0, sweeps, betas, labellers[0], generator)
            out |= {f"pt/{k}": v for k, v in summarise(labels, start_label, float(len(betas))).items()}
            acc = _acceptance(stats)
            out |= {"pt/swap_acc": acc[0] if acc else 0.0, "pt/swap_acc_min": min(acc) if acc else 0.0}
        elif name in stacks:
            rbms = stacks[name]
            per_layer, stats = run_st(rbms, v0, sweeps, labellers[:len(rbms)], generator)
            out |= {f"{name}/{k}": v for k, v in summarise(per_layer[0], start_label, stack_cost(rbms)).items()}
            acc = _acceptance(stats)
            out |= {f"{name}/swap_acc": acc[0] if acc else 0.0}
            for l, labels in enumerate(per_layer[1:], start=1):
                out[f"{name}/jumps_l{l}"] = summarise(labels, start_label, 1.0)["jumps"]
            for l, a in enumerate(acc[1:], start=1):
                out[f"{name}/swap_acc_l{l}"] = a
        else:
            raise ValueError(f"unknown sampler {name!r}; choose from gibbs, pt, {', '.join(stacks)}")
    return out


def _acceptance(stats: dict) -> list[float]:
    return [a / t if t else 0.0 for a, t in zip(stats.get("accepted", []), stats.get("tried", []))]
