"""Mode-jump measurement (issue #53, "Mode jumps" and "Metrics"): every sampler's chains start in
one mode; each sweep the bottom state is labelled (MNIST: a logistic-regression classifier of the two
digits applied to p(v | h); Ising: the magnetisation of p(v | h)) WITH HYSTERESIS: a chain's label
changes only when it enters the other mode's core (classifier probability >= `prob_core`, Ising
|m| >= `ising_core` with the new sign; `method.labels` in YAML) and is held otherwise, so a jump is a
core-to-core transit, not flicker at the boundary. Before its first core entry a chain is unlabelled
(-1). Metrics per sampler row:
  jumps           label changes per chain per 10^4 sweeps (mean over chains)
  jumps_per_cost  jumps / (cost of a sweep in RBM-1 Gibbs sweeps: sum_l N_l M_l / N_1 M_1 for ST, K for PT)
  swap_acc        acceptance of the bottom exchange (ST: RBM 1 <-> RBM 2; PT: beta_1 <-> beta_2)
  balance         |share of labelled sweeps in the start mode - 1/2| over chains and sweeps
  share           the share of core-labelled sweeps in the start mode over the second half of the sweeps
                  (the core label, not the held one: at equilibrium it has RBM 1's exact law)
  mix_err         mean over chains of |a chain's share over the second half - the exact share|, the
                  exact share enumerated over RBM 1's 2^M hidden states (`exact_share`; row `exact`)
Row gibbs_matched: Gibbs given the compute of the stacked sampler (round(cost x sweeps) sweeps),
its jumps counted per 10^4 stacked steps: the cost-matched naive stand-in for `st`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from methods.stacked_tempering.sampler import (gibbs_step, init_stack, linear_betas, parallel_tempering_step,
                                               pt_cost, stack_cost, stacked_tempering_step)

Labeller = Callable[[torch.Tensor], torch.Tensor]   # states (C, N) in [0, 1] -> core labels (C,): 1, 0 or -1


def _check_core(core: float, lo: float, name: str) -> float:
    if not lo < float(core) < 1.0:
        raise ValueError(f"{name} must lie in ({lo}, 1), got {core}")
    return float(core)


def logistic_labeller(x: np.ndarray, y: np.ndarray, seed: int = 0, core: float = 0.9) -> Labeller:
    """A logistic-regression classifier of the two modes fitted on (x, y); returns states -> core
    labels: 1 where P(mode 1) >= core, 0 where P(mode 1) <= 1 - core, -1 (no core) between."""
    from sklearn.linear_model import LogisticRegression

    core = _check_core(core, 0.5, "prob_core")
    clf = LogisticRegression(max_iter=1000, random_state=seed).fit(x, y)
    w = torch.as_tensor(clf.coef_[0], dtype=torch.float32)
    b = float(clf.intercept_[0])
    return lambda p: core_labels(torch.sigmoid(p.to(torch.float32) @ w + b) * 2 - 1, 2 * core - 1)


def magnetisation_labeller(core: float = 0.5) -> Labeller:
    """Ising: the mean spin m of 2 p - 1 (p = p(v = 1 | h)); core labels 1 where m >= core, 0 where
    m <= -core, -1 between."""
    core = _check_core(core, 0.0, "ising_core")
    return lambda p: core_labels((2 * p.to(torch.float32) - 1).mean(-1), core)


def core_labels(score: torch.Tensor, core: float) -> torch.Tensor:
    """score in [-1, 1] (positive towards mode 1) -> 1 (score >= core), 0 (score <= -core), else -1."""
    out = torch.full(score.shape, -1, dtype=torch.long)
    out[score >= core] = 1
    out[score <= -core] = 0
    return out


def hold_labels(cores: torch.Tensor) -> torch.Tensor:
    """Hysteresis: core labels (T, C) in {1, 0, -1} -> labels that keep their previous value while a
    chain is outside both cores (-1 until its first core entry)."""
    if cores.dim() != 2:
        raise ValueError(f"core labels must be (T, C), got shape {tuple(cores.shape)}")
    out = cores.clone()
    for t in range(1, len(out)):
        out[t] = torch.where(out[t] < 0, out[t - 1], out[t])
    return out


def count_transits(cores: torch.Tensor) -> torch.Tensor:
    """Core-to-core transits per chain: (T, C) core labels -> (C,) changes of the held label (the
    first core entry of an unlabelled chain is not a transit)."""
    held = hold_labels(cores)
    return ((held[1:] != held[:-1]) & (held[:-1] >= 0)).sum(0)


@torch.no_grad()
def exact_share(rbm, labeller: Labeller, start_label: int, chunk: int = 1 << 15) -> float:
    """RBM 1's exact share of the start mode among core-labelled states: the label is a function of
    the hidden state (labeller(p(v | h))), so enumerate all 2^M hidden states under p(h) ∝ exp(-F_h(h))
    (float64 log-weights): P(label = start) / P(label in {0, 1})."""
    m = rbm.num_hidden
    if m > 24:
        raise ValueError(f"exact_share enumerates 2^M hidden states; M = {m} is too many (at most 24)")
    bits = 2 ** torch.arange(m)
    logw, labels = [], []
    for lo in range(0, 2 ** m, chunk):
        idx = torch.arange(lo, min(lo + chunk, 2 ** m))
        h = ((idx[:, None] & bits) > 0).to(rbm.weight.dtype)
        logw.append(-rbm.free_energy_h(h).double())
        labels.append(labeller(rbm.visible_probs(h)))
    logw, labels = torch.cat(logw), torch.cat(labels)
    w = torch.exp(logw - logw.max())
    cored = float(w[labels >= 0].sum())
    if cored == 0.0:
        raise ValueError("no hidden state of RBM 1 lies in a mode's core: the exact share is undefined")
    return float(w[labels == start_label].sum()) / cored


def summarise(cores: torch.Tensor, start_label: int, cost: float, exact: float | None = None,
              per_steps: int | None = None) -> dict[str, float]:
    """core labels (T, C) -> transits per chain per 10^4 sweeps (per 10^4 of `per_steps` steps when
    given: a cost-matched row), per cost, the balance (share of labelled sweeps in the start mode;
    1/2 off when no sweep is labelled), and over the second half of the sweeps the core share of the
    start mode and, with `exact`, mix_err: the mean over chains of |a chain's core share - exact|
    (a chain with no core sweep in the second half takes its held label's share: 1 in the start mode
    or unlabelled, 0 in the other)."""
    steps = max(len(cores) - 1, 1) if per_steps is None else per_steps
    jumps = float(count_transits(cores).float().mean()) * 1e4 / steps
    held = hold_labels(cores)
    labelled = int((held >= 0).sum())
    share = float((held == start_label).sum()) / labelled if labelled else 1.0
    out = {"jumps": jumps, "jumps_per_cost": jumps / cost, "balance": abs(share - 0.5)}
    late, late_held = cores[len(cores) // 2:], held[len(cores) // 2:]
    cored = (late >= 0).sum(0)
    in_start = (late == start_label).sum(0)
    # a chain never in a core over the second half: its held label's share (1 or 0; start if unlabelled)
    fallback = torch.where(late_held[-1] == start_label, 1.0, 0.0)
    fallback = torch.where(late_held[-1] < 0, 1.0, fallback)
    per_chain = torch.where(cored > 0, in_start.double() / cored.clamp(min=1).double(), fallback.double())
    out["share"] = float(in_start.sum()) / float(cored.sum()) if int(cored.sum()) else float(fallback.mean())
    if exact is not None:
        out["mix_err"] = float((per_chain - float(exact)).abs().mean())
    return out


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
                pt_replicas: int, pt_beta_min: float, generator, exact: float | None = None) -> dict[str, float]:
    """`<row>/<metric>` for every sampler in `samplers` (gibbs, gibbs_matched, pt, st, st_random);
    `stacks` maps st / st_random to their RBM lists; `exact`: RBM 1's exact start-mode share (row
    `exact`, and every row's mix_err). gibbs_matched runs round(cost x sweeps) Gibbs sweeps, cost the
    trained stack's (`stack_cost`), and counts its jumps per 10^4 stacked steps."""
    out: dict[str, float] = {} if exact is None else {"exact/share": float(exact)}
    for name in samplers:
        if name == "gibbs":
            out |= {f"gibbs/{k}": v for k, v in summarise(run_gibbs(rbm1, v0, sweeps, labellers[0], generator),
                                                          start_label, 1.0, exact).items()}
        elif name == "gibbs_matched":
            cost = stack_cost(stacks.get("st", [rbm1]))
            labels = run_gibbs(rbm1, v0, int(round(cost * sweeps)), labellers[0], generator)
            out |= {f"gibbs_matched/{k}": v for k, v in summarise(labels, start_label, cost, exact,
                                                                  per_steps=sweeps).items()}
        elif name == "pt":
            betas = linear_betas(pt_replicas, pt_beta_min)
            labels, stats = run_pt(rbm1, v0, sweeps, betas, labellers[0], generator)
            out |= {f"pt/{k}": v for k, v in summarise(labels, start_label, pt_cost(len(betas)), exact).items()}
            acc = _acceptance(stats)
            out |= {"pt/swap_acc": acc[0] if acc else 0.0, "pt/swap_acc_min": min(acc) if acc else 0.0}
        elif name in stacks:
            rbms = stacks[name]
            per_layer, stats = run_st(rbms, v0, sweeps, labellers[:len(rbms)], generator)
            out |= {f"{name}/{k}": v for k, v in summarise(per_layer[0], start_label, stack_cost(rbms), exact).items()}
            acc = _acceptance(stats)
            out |= {f"{name}/swap_acc": acc[0] if acc else 0.0}
            for l, labels in enumerate(per_layer[1:], start=1):
                out[f"{name}/jumps_l{l}"] = summarise(labels, start_label, 1.0)["jumps"]
            for l, a in enumerate(acc[1:], start=1):
                out[f"{name}/swap_acc_l{l}"] = a
        else:
            raise ValueError(f"unknown sampler {name!r}; choose from gibbs, gibbs_matched, pt, {', '.join(stacks)}")
    return out


def _acceptance(stats: dict) -> list[float]:
    return [a / t if t else 0.0 for a, t in zip(stats.get("accepted", []), stats.get("tried", []))]
