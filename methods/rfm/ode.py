"""Sampling and likelihoods: fixed-step ODE integration with projection after every step."""
from __future__ import annotations

import torch


def divergence(v: torch.Tensor, x: torch.Tensor, manifold, exact: bool = True, probes: int = 1,
               create_graph: bool = False) -> torch.Tensor:
    """Riemannian divergence of the tangent field v(x) (graph from x): tr(P J), J = ∂v/∂x the
    ambient Jacobian and P the projection onto the tangent space. Exact by one backward pass
    per ambient coordinate, or Hutchinson's estimate E[εᵀ J ε] with ε = P z, z ~ N(0, I)."""
    n, dim = x.shape
    if exact:
        # P e_i for every coordinate i in one projection: tr(PJ) = Σ_i (P e_i)ᵀ J e_i (P symmetric)
        eye = torch.eye(dim, dtype=x.dtype, device=x.device)[:, None, :].expand(dim, n, dim)
        basis = manifold.proju(x.detach(), eye)                                           # (dim, n, dim)
        total = 0.0
        for i in range(dim):
            (g,) = torch.autograd.grad(v, x, basis[i], retain_graph=True, create_graph=create_graph)
            total = total + g[:, i]
        return total
    total = 0.0
    for _ in range(probes):
        eps = manifold.proju(x, torch.randn_like(x))
        (g,) = torch.autograd.grad(v, x, eps, retain_graph=True, create_graph=create_graph)
        total = total + (g * eps).sum(-1)
    return total / probes


def rk4_step(f, t: float, x: torch.Tensor, dt: float) -> torch.Tensor:
    k1 = f(t, x)
    k2 = f(t + dt / 2, x + dt / 2 * k1)
    k3 = f(t + dt / 2, x + dt / 2 * k2)
    k4 = f(t + dt, x + dt * k3)
    return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


@torch.no_grad()
def sample(field, manifold, x0: torch.Tensor, steps: int, method: str = "rk4") -> torch.Tensor:
    """Integrate dx/dt = v(t, x) from t = 0 to 1, projecting back onto the manifold after each step."""
    x, dt = x0, 1.0 / steps
    for k in range(steps):
        t = k * dt
        vt = lambda s, y: field(torch.full((), s, dtype=y.dtype, device=y.device), y)  # noqa: E731
        x = rk4_step(vt, t, x, dt) if method == "rk4" else x + dt * vt(t, x)
        x = manifold.projx(x)
    return x


def log_likelihood(field, manifold, x1: torch.Tensor, steps: int, exact: bool = True, probes: int = 1) -> torch.Tensor:
    """log p_1(x1) = log p_0(x0) − ∫₀¹ div v_t(x_t) dt, integrating x and the divergence
    integral from data (t = 1) back to noise (t = 0) with RK4; p_0 uniform (−log volume)."""
    def joint(t: float, state: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            x = state[:, :-1].detach().requires_grad_(True)
            v = field(torch.full((), t, dtype=x.dtype, device=x.device), x)
            div = divergence(v, x, manifold, exact, probes)
        return torch.cat([v.detach(), div.detach().unsqueeze(-1)], dim=-1)

    state = torch.cat([x1, x1.new_zeros(len(x1), 1)], dim=-1)
    dt = -1.0 / steps
    for k in range(steps):
        state = rk4_step(joint, 1.0 + k * dt, state, dt)
        state = torch.cat([manifold.projx(state[:, :-1]), state[:, -1:]], dim=-1)
    # state[:, -1] = ∫₁⁰ div dt = −∫₀¹ div dt
    return -manifold.log_volume + state[:, -1]
