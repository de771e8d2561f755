"""FedWaD (Rakotomamonjy, Nadjahi, Ralaivola, ICLR 2024, Algorithm 1; official `FedOT.fit`):
the Wasserstein distance between the measures of two clients, neither of which shares its
samples. The server holds eta; each client sends a measure on the geodesic from eta to its own
samples and the exact W(eta, its samples); the server moves eta between the two. By the triangle
inequality W(mu, nu) <= W(mu, eta) + W(eta, nu), with equality when eta lies on a geodesic."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from methods.fedwad.transport import check_metric, check_samples, check_t, check_weights, interpolate, wasserstein


@dataclass
class FedWaDResult:
    estimate: float          # W(X_s, eta_K) + W(eta_K, X_t): the upper bound after the last iteration
    costs: np.ndarray        # (n_iter + 1,): the K sums the server recorded, then the final one
    support: np.ndarray      # eta_K's atoms (m, d)
    weights: np.ndarray      # eta_K's masses (m,)


def fedwad(xs, xt, n_supp: int = 100, n_iter: int = 30, t: float | None = None, seed: int = 0, init=None,
           init_scale: float = 1.0, ws=None, wt=None, metric: str = "sqeuclidean", exact: bool = False) -> FedWaDResult:
    """Iteration k: client s: (g, W_s) = interpolate(eta, X_s, t1); client t: (h, W_t) =
    interpolate(eta, X_t, t2); the server records W_s + W_t and sets eta = interpolate(h, g, t3).
    t=None draws each t ~ U(0, 1) (official `t_val=None`); a number fixes all three. eta^0 =
    `init` (uniform weights) or n_supp x d draws of N(0, init_scale^2). One
    numpy.random.default_rng(seed) draws eta^0 and then every t, in that order."""
    check_metric(metric)
    xs = check_samples(xs, "xs")
    xt = check_samples(xt, "xt", xs.shape[1])
    ws, wt = check_weights(ws, len(xs), "ws"), check_weights(wt, len(xt), "wt")
    if t is not None:
        t = check_t(t)
    if int(n_iter) != n_iter or n_iter < 0:
        raise ValueError(f"n_iter must be an integer >= 0, got {n_iter!r}")
    if int(n_supp) != n_supp or n_supp < 1:   # checked with `init` too, where the support comes from init
        raise ValueError(f"n_supp must be an integer >= 1, got {n_supp!r}")
    rng = np.random.default_rng(seed)
    if init is None:
        if not np.isfinite(init_scale) or init_scale <= 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale!r}")
        eta = rng.standard_normal((int(n_supp), xs.shape[1])) * init_scale
    else:
        eta = check_samples(init, "init", xs.shape[1]).copy()
    eta_w = np.full(len(eta), 1.0 / len(eta))

    def draw() -> float:
        return float(rng.uniform()) if t is None else t

    costs = []
    for _ in range(int(n_iter)):
        g, g_w, cost_s = interpolate(eta, eta_w, xs, ws, draw(), metric, exact)    # on client s
        h, h_w, cost_t = interpolate(eta, eta_w, xt, wt, draw(), metric, exact)    # on client t
        costs.append(cost_s + cost_t)                                              # on the server
        eta, eta_w, _ = interpolate(h, h_w, g, g_w, draw(), metric, exact)
    estimate = wasserstein(xs, eta, ws, eta_w, metric) + wasserstein(eta, xt, eta_w, wt, metric)
    costs.append(estimate)
    return FedWaDResult(float(estimate), np.asarray(costs), eta, eta_w)
