"""Exact optimal transport between two discrete measures (POT's network simplex), the
interpolating measures on its geodesic, and the Gaussian (Bures-Wasserstein) closed form.
Everything is numpy float64 in and out."""
from __future__ import annotations

import numpy as np
import ot

METRICS = {"sqeuclidean": 2, "euclidean": 1}   # ground cost -> the p of W_p
PLAN_THRESHOLD = 1e-12                          # plan entries kept by the exact interpolant
EMD_MAX_ITER = 10_000_000                       # POT's default 100k stops short at n = 2000


def check_samples(x, name: str = "x", dim: int | None = None) -> np.ndarray:
    """(n, d) finite float64 with n >= 1; `dim` the dimension it must match."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must be an (n, d) array with n, d >= 1, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} holds NaN or inf")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} has dimension {arr.shape[1]}, the other measure {dim}: mismatched dimensions")
    return arr


def check_weights(w, n: int, name: str = "weights") -> np.ndarray:
    """None -> uniform; else n finite non-negative numbers summing to 1."""
    if w is None:
        return np.full(n, 1.0 / n)
    arr = np.asarray(w, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    if not np.isfinite(arr).all() or (arr < 0).any() or abs(arr.sum() - 1.0) > 1e-6:
        raise ValueError(f"{name} must be finite, non-negative and sum to 1 (sum {arr.sum():.6g})")
    return arr


def check_metric(metric: str) -> int:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    return METRICS[metric]


def optimal_plan(x, a, y, b, metric: str = "sqeuclidean") -> tuple[np.ndarray, np.ndarray, float]:
    """(plan G, ground cost M, W): M = ot.dist(x, y, metric); G = ot.emd(a, b, M / max(M.max(), 1))
    (the official scaling, for the solver's numerics); W = (sum G * M)^(1/p)."""
    p = check_metric(metric)
    x = check_samples(x, "x")
    y = check_samples(y, "y", x.shape[1])
    a, b = check_weights(a, len(x), "a"), check_weights(b, len(y), "b")
    cost = ot.dist(x, y, metric=metric)
    plan = ot.emd(a, b, cost / max(cost.max(), 1.0), numItermax=EMD_MAX_ITER)
    return plan, cost, float(max(np.sum(plan * cost), 0.0) ** (1.0 / p))


def wasserstein(x, y, a=None, b=None, metric: str = "sqeuclidean") -> float:
    """W_p(mu, nu) between sum_i a_i delta_{x_i} and sum_j b_j delta_{y_j} (p = 2 for
    sqeuclidean, 1 for euclidean); uniform weights when None."""
    return optimal_plan(x, a, y, b, metric)[2]


def check_t(t) -> float:
    t = float(t)
    if not np.isfinite(t) or not 0.0 <= t <= 1.0:
        raise ValueError(f"t must be in [0, 1], got {t!r}")
    return t


def interpolate(x, a, y, b, t: float, metric: str = "sqeuclidean",
                exact: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
    """A measure at time t on the geodesic from mu (x, a) to nu (y, b), and W(mu, nu).

    Approximate (official `approx_interp=True`): support (1 - t) x + t diag(1/a) G y (each x_i
    moved toward its barycentric projection), weights a. Exact (official `get_interp_measure`):
    one atom (1 - t) x_i + t y_j of mass G_ij for every G_ij > 1e-12, renormalised.
    Returns (support, weights, W)."""
    t = check_t(t)
    x = check_samples(x, "x")
    y = check_samples(y, "y", x.shape[1])
    a, b = check_weights(a, len(x), "a"), check_weights(b, len(y), "b")
    plan, _, cost = optimal_plan(x, a, y, b, metric)
    if exact:
        rows, cols = np.nonzero(plan > PLAN_THRESHOLD)
        mass = plan[rows, cols]
        return (1.0 - t) * x[rows] + t * y[cols], mass / mass.sum(), cost
    # a zero-mass atom has an empty plan row: it stays where it is
    inv = np.divide(1.0, a, out=np.zeros_like(a), where=a > 0)
    target = (inv[:, None] * plan) @ y
    target[a <= 0] = x[a <= 0]
    return (1.0 - t) * x + t * target, a.copy(), cost


def psd_sqrt(c: np.ndarray) -> np.ndarray:
    """Symmetric square root of a positive semi-definite matrix (eigenvalues clipped at 0)."""
    vals, vecs = np.linalg.eigh((c + c.T) / 2)
    return (vecs * np.sqrt(np.clip(vals, 0.0, None))) @ vecs.T


def bures_wasserstein(xs, xt) -> float:
    """W_2 between the Gaussian fits N(m_s, C_s) and N(m_t, C_t) (np.cov, unbiased):
    W^2 = |m_s - m_t|^2 + tr(C_s + C_t - 2 (C_s^1/2 C_t C_s^1/2)^1/2)."""
    xs = check_samples(xs, "xs")
    xt = check_samples(xt, "xt", xs.shape[1])
    if len(xs) < 2 or len(xt) < 2:
        raise ValueError("bures_wasserstein needs at least 2 samples on each side (a covariance)")
    cs = np.atleast_2d(np.cov(xs, rowvar=False))
    ct = np.atleast_2d(np.cov(xt, rowvar=False))
    root = psd_sqrt(cs)
    cross = psd_sqrt(root @ ct @ root)
    sq = np.sum((xs.mean(0) - xt.mean(0)) ** 2) + np.trace(cs) + np.trace(ct) - 2 * np.trace(cross)
    return float(np.sqrt(max(sq, 0.0)))
