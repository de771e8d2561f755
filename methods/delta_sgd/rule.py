"""Δ-SGD's local step size (Kim, Toghani, Uribe, Kyrillidis, ICLR 2024, Algorithm 1; official
`src/adsgd.py` Adsgd and `src/update.py` LocalUpdate.update_weights), the growth-only control and
the regret table. All parameters are treated as one vector; the state (η, θ, x_{k-1}) is fresh
on every call, as the official code rebuilds its optimizer every round."""
from __future__ import annotations

import copy
import math
from typing import Callable, Iterable, Mapping

import torch


def _norm(v) -> float:
    """A number as it is (it is a norm already); a tensor or a list of tensors by its 2-norm."""
    if isinstance(v, torch.Tensor):
        return float(v.detach().double().norm())
    if isinstance(v, (list, tuple)):
        return math.sqrt(sum(float(t.detach().double().norm()) ** 2 for t in v))
    return float(v)


def check_rule(lr: float, amplifier: float, damping: float = 1.0, eps: float = 0.0, theta: float = 1.0) -> None:
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"the step size must be finite and > 0, got lr={lr!r}")
    if not (math.isfinite(theta) and theta > 0):
        raise ValueError(f"theta (the last step-size ratio) must be finite and > 0, got {theta!r}")
    if not (math.isfinite(amplifier) and amplifier >= 0):
        raise ValueError(f"the amplifier delta must be finite and >= 0, got {amplifier!r}")
    if not (math.isfinite(damping) and damping > 0):
        raise ValueError(f"damping (2/gamma) must be finite and > 0, got {damping!r}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")


def delta_lr(lr_prev: float, theta_prev: float, param_diff, grad_diff, amplifier: float = 0.1,
             damping: float = 1.0, eps: float = 1e-8) -> tuple[float, float]:
    """η_k = min(η_{k-1} √(1 + δ θ_{k-1}), ‖x_k − x_{k-1}‖ / (damping ‖g_k − g'_k‖)) + ε when both
    norms are > 0, else η_{k-1} √(1 + δ θ_{k-1}); θ_k = η_k / η_{k-1}. `param_diff`, `grad_diff`:
    the norms, or the difference tensors (a tensor or a list of tensors: one vector)."""
    lr_prev, theta_prev = float(lr_prev), float(theta_prev)
    check_rule(lr_prev, float(amplifier), float(damping), float(eps), theta_prev)
    dx, dg = _norm(param_diff), _norm(grad_diff)
    if dx < 0 or dg < 0:
        raise ValueError(f"norms must be >= 0, got {dx}, {dg}")
    grow = lr_prev * math.sqrt(1.0 + amplifier * theta_prev)
    lr = min(grow, dx / (damping * dg)) + eps if dx > 0 and dg > 0 else grow
    return lr, lr / lr_prev


def _diff_norm(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """‖a − b‖ over all tensors as one vector: each tensor's norm in its own dtype (float32 for a
    float32 model), their squares summed in float64, as the official `Adsgd.compute_dif_norms`
    (`(p - q).norm().item() ** 2` summed). No float64 copy of the weights."""
    norms = torch._foreach_norm(torch._foreach_sub(a, b)) if a else []
    return math.sqrt(sum(float(n) ** 2 for n in norms))


def _grads(model: torch.nn.Module, params: list[torch.Tensor], loss: torch.Tensor) -> list[torch.Tensor]:
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def delta_sgd_local(model: torch.nn.Module, batches: Iterable, loss_fn: Callable, lr: float = 0.2,
                    amplifier: float = 0.1, damping: float = 1.0, eps: float = 1e-8,
                    weight_decay: float = 0.0) -> list[float]:
    """One client's local pass, in place. Step k on batch B_k: g_k = ∇f(x_k; B_k), g'_k =
    ∇f(x_{k-1}; B_k) (a copy of the previous weights on the same batch; x_{-1} = x_0), η_k =
    `delta_lr`(η_{k-1}, θ_{k-1}, ‖x_k − x_{k-1}‖, ‖g_k − g'_k‖) from η_{-1} = `lr`, θ_{-1} = 1;
    then x_{k+1} = x_k − η_k (g_k + wd x_k). Returns η_0, η_1, ...; `loss_fn(model, batch)`."""
    check_rule(float(lr), float(amplifier), float(damping), float(eps))
    if not (math.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be finite and >= 0, got {weight_decay!r}")
    prev = copy.deepcopy(model)
    params = [p for p in model.parameters() if p.requires_grad]
    prev_params = [p for p in prev.parameters() if p.requires_grad]
    step, theta, steps = float(lr), 1.0, []
    for batch in batches:
        g = _grads(model, params, loss_fn(model, batch))
        g_prev = _grads(prev, prev_params, loss_fn(prev, batch))
        with torch.no_grad():
            dx, dg = _diff_norm(params, prev_params), _diff_norm(g, g_prev)
            step, theta = delta_lr(step, theta, dx, dg, amplifier, damping, eps)
            prev.load_state_dict(model.state_dict())      # x_{k-1} <- x_k (buffers too)
            for p, gk in zip(params, g):
                p.sub_(step * (gk + weight_decay * p) if weight_decay else step * gk)
        steps.append(step)
    return steps


def growth_local(model: torch.nn.Module, batches: Iterable, loss_fn: Callable, lr: float = 0.2,
                 amplifier: float = 0.1) -> list[float]:
    """The control: Δ-SGD's schedule without the smoothness bound, η_k = η_{k-1} √(1 + δ θ_{k-1}),
    θ_k = η_k / η_{k-1} (from η_{-1} = `lr`, θ_{-1} = 1), plain SGD steps x_{k+1} = x_k − η_k g_k."""
    check_rule(float(lr), float(amplifier))
    params = [p for p in model.parameters() if p.requires_grad]
    step, theta, steps = float(lr), 1.0, []
    for batch in batches:
        g = _grads(model, params, loss_fn(model, batch))
        new = step * math.sqrt(1.0 + amplifier * theta)
        step, theta = new, new / step
        with torch.no_grad():
            for p, gk in zip(params, g):
                p.sub_(step * gk)
        steps.append(step)
    return steps


def regret(acc: Mapping[str, Mapping[str, float]], reference: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
    """`acc[row][task]` (points) -> per row `regret_<task>` = max over the `reference` rows (all
    rows when None) on that task − the row's, `max_regret` and `mean_regret` over tasks. A row
    outside the reference (a control) is scored against the same best and may go negative."""
    if not acc:
        raise ValueError("regret needs at least one row")
    rows = list(acc)
    ref = rows if reference is None else list(reference)
    if not ref or any(r not in acc for r in ref):
        raise ValueError(f"reference rows {ref} must be a non-empty subset of the rows {rows}")
    tasks = list(acc[rows[0]])
    if not tasks:
        raise ValueError(f"row {rows[0]!r} has no tasks")
    for r in rows:
        if set(acc[r]) != set(tasks):
            raise ValueError(f"every row must have the same tasks: {rows[0]!r} has {sorted(tasks)}, "
                             f"{r!r} has {sorted(acc[r])}")
        for t in tasks:
            if not math.isfinite(float(acc[r][t])):
                raise ValueError(f"acc[{r!r}][{t!r}] is not finite ({acc[r][t]!r}); score a diverged row at chance")
    best = {t: max(float(acc[r][t]) for r in ref) for t in tasks}
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        reg = {f"regret_{t}": best[t] - float(acc[r][t]) for t in tasks}
        vals = list(reg.values())
        out[r] = {**reg, "max_regret": max(vals), "mean_regret": sum(vals) / len(vals)}
    return out


def log_uniform(rng, low: float, high: float) -> float:
    """exp(U(log low, log high)): the random-step control's draw."""
    if not 0 < low <= high:
        raise ValueError(f"need 0 < low <= high, got {low}, {high}")
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


__all__ = ["check_rule", "delta_lr", "delta_sgd_local", "growth_local", "log_uniform", "regret"]
