"""The causal dropout model's simulator (official `main.py`: `DAG_Simulator`, `Data_Simulator`) and the
imputations it is compared with.

    Z_j = Σ_i W[i, j] Z_i + ε_j,   ε_j ~ N(μ_j, s_j²)            true expressions on a DAG
    X_j = (1 − D_j) Z_j                                          measured expressions
    car:       P(D_j = 1) = q_j,  q_j ~ U(0.4, 0.7)              (dropout independent of Z)
    truncated: D_j = 1[Z_j ≤ c_j],  c_j = the U(20, 50)th percentile of Z_j   (self-masking)
    logistic:  P(D_j = 1 | Z_j) = σ(a + b Z_j),  (a, b) = (−0.5, −1.5)         (self-masking)
"""
from __future__ import annotations

from itertools import combinations

import numpy as np
from scipy.special import expit

MECHANISMS = ("car", "truncated", "logistic")
IMPUTATIONS = ("mean", "knn")
TRANSFORMS = ("none", "exp")


def _finite(name: str, array: np.ndarray) -> None:
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds NaN or infinite values; the causal dropout model needs finite expressions")


def _range(name: str, pair, low: float, high: float) -> tuple[float, float]:
    lo, hi = (float(v) for v in pair)
    if not (low <= lo <= hi <= high):
        raise ValueError(f"{name} must be (lo, hi) with {low} <= lo <= hi <= {high}, got {tuple(pair)}")
    return lo, hi


def topological_order(adjacency) -> list[int]:
    """Nodes parents-first (Kahn); ValueError unless `adjacency` is a square 0/1 matrix of a DAG
    (A[i, j] = 1 iff i → j)."""
    a = np.asarray(adjacency)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"adjacency must be a square matrix (A[i, j] = 1 iff i -> j), got shape {a.shape}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError("adjacency must hold only 0 and 1")
    indegree = a.sum(axis=0).astype(int)
    order, ready = [], [j for j in range(len(a)) if indegree[j] == 0]
    while ready:
        i = ready.pop(0)
        order.append(i)
        for j in np.flatnonzero(a[i]):
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(int(j))
    if len(order) < len(a):
        raise ValueError("adjacency is not a DAG: it has a directed cycle (or a self-loop)")
    return order


def random_dag(num_nodes: int, avg_degree: float, seed: int = 0) -> np.ndarray:
    """Erdős–Rényi DAG with round(p·deg/2) edges drawn uniformly among the pairs, oriented along a random
    order of the nodes (official `DAG_Simulator`: random.sample of the pairs, oriented low → high index).
    Returns A (p, p) int, A[i, j] = 1 iff i → j."""
    if int(num_nodes) != num_nodes or num_nodes < 2:
        raise ValueError(f"num_nodes must be an integer >= 2, got {num_nodes}")
    if not avg_degree >= 0:
        raise ValueError(f"avg_degree must be >= 0, got {avg_degree}")
    num_nodes = int(num_nodes)
    rng = np.random.default_rng(seed)
    pairs = list(combinations(range(num_nodes), 2))
    num_edges = min(int(round(num_nodes * avg_degree / 2)), len(pairs))
    order = rng.permutation(num_nodes)          # order[k]: the node at position k
    adjacency = np.zeros((num_nodes, num_nodes), dtype=int)
    for index in rng.choice(len(pairs), size=num_edges, replace=False):
        early, late = pairs[index]
        adjacency[order[early], order[late]] = 1
    return adjacency


def linear_sem(adjacency, n: int, seed: int = 0, weight_range=(0.25, 1.0), noise_mean_range=(-1.0, 1.0),
               noise_std_range=(1.0, 2.0), transform: str = "none") -> tuple[np.ndarray, np.ndarray]:
    """Linear Gaussian SEM on the DAG: weights ±U(weight_range) (sign ±1 with probability 1/2), noise
    N(μ_j, s_j²), μ_j ~ U(noise_mean_range), s_j ~ U(noise_std_range); z_j = Σ_i W[i, j] z_i + ε_j in
    topological order. `transform="exp"`: each gene standardised, then exponentiated (official
    `final_exp`: a lognormal copula, a monotone map of each gene). Returns (z (n, p), W (p, p))."""
    if transform not in TRANSFORMS:
        raise ValueError(f"unknown transform {transform!r}; choose from {', '.join(TRANSFORMS)}")
    order = topological_order(adjacency)
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    w_lo, w_hi = _range("weight_range", weight_range, 0.0, np.inf)
    mu_lo, mu_hi = _range("noise_mean_range", noise_mean_range, -np.inf, np.inf)
    s_lo, s_hi = _range("noise_std_range", noise_std_range, 0.0, np.inf)
    a = np.asarray(adjacency)
    p = len(a)
    rng = np.random.default_rng(seed)
    signs = np.where(rng.random((p, p)) < 0.5, -1.0, 1.0)
    weights = a * signs * rng.uniform(w_lo, w_hi, size=(p, p))
    means, stds = rng.uniform(mu_lo, mu_hi, size=p), rng.uniform(s_lo, s_hi, size=p)
    noise = rng.normal(size=(int(n), p)) * stds + means
    z = np.zeros((int(n), p))
    for j in order:
        z[:, j] = z @ weights[:, j] + noise[:, j]
    if transform == "exp":
        z = np.exp((z - z.mean(axis=0)) / z.std(axis=0))
    return z, weights


def apply_dropout(z, mechanism: str, seed: int = 0, rate_range=(0.4, 0.7), percentile_range=(20.0, 50.0),
                  logistic=(-0.5, -1.5)) -> tuple[np.ndarray, np.ndarray]:
    """X = (1 − D) Z under a dropout mechanism (module docstring). Returns (x, dropped) with
    dropped[k, j] = D_j of cell k (bool)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown dropout mechanism {mechanism!r}; choose from {', '.join(MECHANISMS)}")
    z = np.asarray(z, dtype=float)
    if z.ndim != 2:
        raise ValueError(f"z must be (cells, genes), got shape {z.shape}")
    _finite("z", z)
    rng = np.random.default_rng(seed)
    n, p = z.shape
    if mechanism == "car":
        lo, hi = _range("rate_range (dropout rates)", rate_range, 0.0, 1.0)
        dropped = rng.random((n, p)) < rng.uniform(lo, hi, size=p)
    elif mechanism == "truncated":
        lo, hi = _range("percentile_range", percentile_range, 0.0, 100.0)
        thresholds = np.array([np.percentile(z[:, j], q) for j, q in enumerate(rng.uniform(lo, hi, size=p))])
        dropped = z <= thresholds
    else:
        intercept, slope = (float(v) for v in logistic)
        dropped = rng.random((n, p)) < expit(intercept + slope * z)
    return np.where(dropped, 0.0, z), dropped


def impute(x, method: str = "mean", k: int = 5, reference: int | None = None, seed: int = 0) -> np.ndarray:
    """Zeros taken as missing and filled in: `mean` by the gene's mean over its nonzero cells (a gene with
    no nonzero cell stays 0); `knn` by scikit-learn's KNNImputer (k neighbours, nan-Euclidean distance on
    the genes both cells measured), the neighbours searched among `reference` cells drawn at random
    (None: all cells; the search is O(cells x reference))."""
    if method not in IMPUTATIONS:
        raise ValueError(f"unknown imputation {method!r}; choose from {', '.join(IMPUTATIONS)}")
    x = np.asarray(x, dtype=float)
    _finite("x", x)
    missing = x == 0
    if method == "mean":
        counts = (~missing).sum(axis=0)
        means = np.divide(x.sum(axis=0), counts, out=np.zeros(x.shape[1]), where=counts > 0)
        return np.where(missing, means, x)
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k}")
    from sklearn.impute import KNNImputer

    holes = np.where(missing, np.nan, x)
    imputer = KNNImputer(n_neighbors=int(k), keep_empty_features=True)
    if reference is None or reference >= len(x):
        return imputer.fit_transform(holes)
    donors = np.random.default_rng(seed).choice(len(x), size=int(reference), replace=False)
    filled = imputer.fit(holes[np.sort(donors)]).transform(holes)
    return np.where(missing, filled, x)
