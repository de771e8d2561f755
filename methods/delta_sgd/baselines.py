"""The paper tier's two parameter-free client baselines: SPS (stochastic Polyak step; Loizou et al.,
2021, as the official Δ-SGD code runs it) and DoG (distance over gradients; Ivgi, Hinder and
Carmon, ICML 2023). Like Δ-SGD's, each state is fresh on every call (one client's local pass in
one round): the official `src/update.py` builds its optimiser inside `update_weights`.

SPS (official `src/sps.py` Sps with `adapt_flag='constant'`, as `src/update.py` builds it: c = 0.5,
eps = 1e-8, eta_max None, f* = 0):  η_k = (f(x_k; B_k) − f*) / (c ‖g_k‖² + eps), 0 when
f(x_k; B_k) < f*, capped at eta_max when one is given;  x_{k+1} = x_k − η_k g_k.

DoG (the paper's Algorithm 1 with the global (all parameters as one vector) variant; the defaults of
the authors' `dog-optimizer` package: r_ε = reps_rel (1 + ‖x_0‖), reps_rel 1e-6, eps 1e-8):
  r̄_k = max(r_ε, max_{i≤k} ‖x_i − x_0‖),  G_k = eps + Σ_{i≤k} ‖g_i‖²,  η_k = r̄_k / √G_k,
  x_{k+1} = x_k − η_k g_k.
No iterate averaging (the package recommends it; the server's FedAvg is the only averaging)."""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch

from methods.delta_sgd.rule import _grads


def _finite_pos(name: str, value: float, allow_zero: bool = False) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value


def _sq_norm(tensors: list[torch.Tensor]) -> float:
    """Σ ‖t‖² over all tensors (one vector), summed in float64."""
    return sum(float(t.detach().double().pow(2).sum()) for t in tensors)


def sps_step_size(loss: float, grad_sq_norm: float, c: float = 0.5, eps: float = 1e-8,
                  eta_max: float | None = None, fstar: float = 0.0) -> float:
    """The stochastic Polyak step (f − f*) / (c ‖g‖² + eps); 0 when f < f*; min with `eta_max`."""
    c, eps = _finite_pos("c", c), _finite_pos("eps", eps, allow_zero=True)
    loss, grad_sq_norm, fstar = float(loss), float(grad_sq_norm), float(fstar)
    if not math.isfinite(grad_sq_norm) or grad_sq_norm < 0:
        raise ValueError(f"the squared gradient norm must be finite and >= 0, got {grad_sq_norm!r}")
    if eta_max is not None:
        eta_max = _finite_pos("eta_max", eta_max)
    if c * grad_sq_norm + eps == 0:
        raise ValueError("c * ||g||^2 + eps is 0: give eps > 0")
    if not math.isfinite(loss):
        return float("nan")        # a diverged client: the caller's finite() check stops it next round
    if loss < fstar:
        return 0.0
    step = (loss - fstar) / (c * grad_sq_norm + eps)
    return step if eta_max is None else min(eta_max, step)


def sps_local(model: torch.nn.Module, batches: Iterable, loss_fn: Callable, c: float = 0.5,
              eps: float = 1e-8, eta_max: float | None = None) -> list[float]:
    """One client's local pass with SPS, in place; returns η_0, η_1, ...; `loss_fn(model, batch)`."""
    _finite_pos("c", c), _finite_pos("eps", eps, allow_zero=True)
    params = [p for p in model.parameters() if p.requires_grad]
    steps: list[float] = []
    for batch in batches:
        loss = loss_fn(model, batch)
        g = _grads(model, params, loss)
        step = sps_step_size(float(loss.detach()), _sq_norm(g), c, eps, eta_max)
        with torch.no_grad():
            for p, gk in zip(params, g):
                p.sub_(step * gk)
        steps.append(step)
    return steps


def dog_local(model: torch.nn.Module, batches: Iterable, loss_fn: Callable, reps_rel: float = 1e-6,
              eps: float = 1e-8) -> list[float]:
    """One client's local pass with (global) DoG from a fresh state, in place; returns η_0, η_1, ...
    r_ε = reps_rel (1 + ‖x_0‖); r̄_k = max(r̄_{k−1}, ‖x_k − x_0‖); G_k = G_{k−1} + ‖g_k‖²
    (G_{−1} = eps); η_k = r̄_k / √G_k."""
    reps_rel, eps = _finite_pos("reps_rel", reps_rel), _finite_pos("eps", eps, allow_zero=True)
    params = [p for p in model.parameters() if p.requires_grad]
    x0 = [p.detach().clone() for p in params]
    rbar = reps_rel * (1.0 + math.sqrt(_sq_norm(x0)))
    G, steps = eps, []
    for batch in batches:
        g = _grads(model, params, loss_fn(model, batch))
        with torch.no_grad():
            rbar = max(rbar, math.sqrt(_sq_norm([p - q for p, q in zip(params, x0)])))
            G += _sq_norm(g)
            if G == 0:
                raise ValueError("DoG needs a positive gradient sum: give eps > 0")
            step = rbar / math.sqrt(G) if math.isfinite(G) else float("nan")   # nan: a diverged client
            for p, gk in zip(params, g):
                p.sub_(step * gk)
        steps.append(step)
    return steps


__all__ = ["dog_local", "sps_local", "sps_step_size"]
