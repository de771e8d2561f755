"""Conditional paths of Riemannian Flow Matching (Chen & Lipman, ICLR 2024)."""
from __future__ import annotations

import torch
from torch.func import jvp


def conditional_path(manifold, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor):
    """Geodesic path x_t = exp_{x0}(t · log_{x0}(x1)) and its velocity u_t = d x_t / dt (by jvp).

    t: (N,) or (N, 1). Along it d(x_t, x1) = (1 − t) d(x0, x1) (tested), and u_t equals the
    premetric field of `premetric_field` with the geodesic distance and κ(t) = 1 − t.
    """
    t = t.reshape(-1, 1).to(x0.dtype)
    v = manifold.log(x0, x1)
    x_t, u_t = jvp(lambda s: manifold.exp(x0, s * v), (t,), (torch.ones_like(t),))
    return x_t, u_t


def premetric_field(manifold, x: torch.Tensor, x1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """u_t(x | x1) = (d log κ/dt) · d(x, x1) · ∇d / ‖∇d‖²_g with κ(t) = 1 − t (RFM eq. 12),
    for the geodesic distance, whose Riemannian gradient is −log_x(x1) / d(x, x1)."""
    t = t.reshape(-1, 1).to(x.dtype)
    dlog_kappa = -1.0 / (1.0 - t)
    log = manifold.log(x, x1)
    d = log.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    grad = -log / d
    return dlog_kappa * d * grad / (grad * grad).sum(-1, keepdim=True)


def stratified_times(steps: int, time_eps: float, dtype=torch.float64, generator=None) -> torch.Tensor:
    """The official mesh time grid (rfm_loss_fn): 0, then one uniform draw in each of `steps`
    strata of [0, 1 − ε], then 1 − ε; (steps + 2,) increasing."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    t1 = 1.0 - time_eps
    grid = torch.linspace(0, t1, steps + 1, dtype=dtype)
    grid = grid + torch.rand(steps + 1, dtype=dtype, generator=generator) * t1 / steps
    grid[-1] = t1
    return torch.cat([grid.new_zeros(1), grid])


@torch.no_grad()
def premetric_path(mesh, x0: torch.Tensor, x1: torch.Tensor, times: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The conditional path of a mesh's spectral premetric (RFM section 3.2), by projected Euler
    steps over the increasing time grid `times` (T,) from x0 (N, 3): x_{k+1} = projx(x_k + Δt u(x_k)),
    u(x) = −d(x0, x1) ∇d(x, x1) / ‖∇d‖², which is eq. 12 with κ = 1 − t on the path, where
    d(x_t, x1) = (1 − t) d(x0, x1) (the official solve_path). Returns x_t and u_t, (T, N, 3) each."""
    y = mesh.embedding(x1)
    d0 = (mesh.embedding(x0) - y).norm(dim=-1, keepdim=True)

    def field(x):
        _, grad = mesh.dist_grad(x, y)
        return -d0 * grad / (grad * grad).sum(-1, keepdim=True).clamp_min(1e-20)

    xs, us, x = [x0], [], x0
    for dt in times.diff():
        u = field(x)
        x = mesh.projx(x + dt * u)
        us.append(u)
        xs.append(x)
    us.append(field(x))
    return torch.stack(xs), torch.stack(us)


class SimulatedPaths:
    """Training batches (x_t, u_t, t), each (N, 3), (N, 3), (N,), on a mesh, as a pure function of
    the step (resume and DDP see the same data). Every `path_steps + 2` steps, one projected-Euler
    solve of N conditional paths (x0 ~ uniform, x1 = `points[sampler(solve)]`) on one stratified
    time grid (the official rfm_loss_fn); each of the following steps takes one grid point of every
    path, in a random order per path. The official code puts all of a path's points in one batch;
    spreading them over consecutive steps keeps its cost per point (one solve) at a batch of N
    independent pairs."""

    def __init__(self, mesh, points: torch.Tensor, sampler, seed: int, path_steps: int = 300, time_eps: float = 1e-5):
        self.mesh, self.points, self.sampler, self.seed = mesh, points, sampler, seed
        self.path_steps, self.time_eps = path_steps, time_eps
        self._solve, self._batch = -1, None

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        solve, pos = divmod(step, self.path_steps + 2)
        if solve != self._solve:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + solve)
            x1 = self.points[self.sampler(solve)]
            x0 = self.mesh.random_uniform(len(x1), dtype=x1.dtype, generator=g)
            times = stratified_times(self.path_steps, self.time_eps, x1.dtype, generator=g)
            xs, us = premetric_path(self.mesh, x0, x1, times)                            # (T, N, 3)
            order = torch.rand(len(times), len(x1), generator=g).argsort(0)                # (T, N)
            index = order[..., None].expand(-1, -1, 3)
            self._batch = (xs.gather(0, index), us.gather(0, index), times[order])
            self._solve = solve
        x_t, u_t, t = self._batch
        return x_t[pos], u_t[pos], t[pos]
