"""The Gaussian and federated-OTDD parts of a run: every row of a table from one run per seed
(metrics `<row>/<metric>`), curves per iteration in the run's JSONL."""
from __future__ import annotations

from itertools import combinations
from typing import Callable

import numpy as np
import ot
from scipy.stats import spearmanr

from methods.fedwad.data import dirichlet_clients, gaussian_pair, pooled_images
from methods.fedwad.otdd import augment_with_labels
from methods.fedwad.transport import EMD_MAX_ITER, bures_wasserstein


def exact_w2(xs: np.ndarray, xt: np.ndarray) -> float:
    """The centralised reference: sqrt(ot.emd2) with the squared Euclidean cost, uniform weights."""
    return float(np.sqrt(ot.emd2([], [], ot.dist(xs, xt), numItermax=EMD_MAX_ITER)))


def rel_err(estimate: float, exact: float) -> float:
    """|estimate - exact| / exact (FedWaD's estimate is an upper bound, so for it this is the
    signed error; a control below the exact value, such as Bures, counts its error too)."""
    return abs(estimate - exact) / exact


def run_gaussians(estimator: Callable, g, seed: int, log: Callable[[dict, int], None]) -> dict[str, float]:
    """Per d in g.dims: X_s (n_s) and X_t (n_t) Gaussians; rows fedwad (n_supp = g.n_supp or
    max(n_s, n_t), random t), each variant of g.variants, iter0 (the bound at eta^0) and bures;
    metric rel_err_d<d> against the exact W_2 of the same samples."""
    out: dict[str, float] = {}
    curves: dict[int, dict] = {}
    n_supp = g.n_supp if g.n_supp is not None else max(g.n_s, g.n_t)
    for dim in g.dims:
        xs, xt = gaussian_pair(g.n_s, g.n_t, dim, g.shift, seed)
        exact = exact_w2(xs, xt)
        fed_seed = seed * 1009 + dim + 1   # eta^0 and t: a stream apart from the samples'
        main = estimator(xs, xt, n_supp=n_supp, seed=fed_seed)
        out[f"fedwad/rel_err_d{dim}"] = rel_err(main.estimate, exact)
        out[f"iter0/rel_err_d{dim}"] = rel_err(main.costs[0], exact)
        for name, change in g.variants.items():
            res = estimator(xs, xt, **{"n_supp": n_supp, **dict(change)}, seed=fed_seed)
            out[f"{name}/rel_err_d{dim}"] = rel_err(res.estimate, exact)
        out[f"bures/rel_err_d{dim}"] = rel_err(bures_wasserstein(xs, xt), exact)
        for k, c in enumerate(main.costs):
            curves.setdefault(k, {})[f"curve/rel_err_d{dim}"] = rel_err(c, exact)
    for k, row in curves.items():
        log({"iteration": k, **row}, k)
    return out


def run_otdd(estimator: Callable, o, fed, ds_cfg, seed: int, log: Callable[[dict, int], None]) -> dict[str, float]:
    """Fashion-MNIST clients (dirichlet_partition), every pair: FedWaD^2 on the augmented samples
    against the centralised OTDD (ot.emd2 on them); per row the median and max relative error
    over the pairs and the Spearman correlation with the exact values."""
    x, y = pooled_images(ds_cfg, "train", o.pool)
    clients = dirichlet_clients(x, y, o.num_images, fed.num_clients, fed.alpha, fed.min_size, o.min_class, seed)
    augmented = [augment_with_labels(cx, cy) for cx, cy in clients]   # each client, locally
    rows = {"fedwad": {}, **{name: dict(change) for name, change in o.variants.items()}}
    errors: dict[str, list] = {r: [] for r in rows}
    values: dict[str, list] = {r: [] for r in rows}
    exact_all = []
    for step, (i, j) in enumerate(combinations(range(len(clients)), 2)):
        a, b = augmented[i], augmented[j]
        exact = float(ot.emd2([], [], ot.dist(a, b), numItermax=EMD_MAX_ITER))   # OTDD, squared
        exact_all.append(exact)
        n_supp = o.n_supp if o.n_supp is not None else max(len(a), len(b))
        for name, change in rows.items():
            res = estimator(a, b, **{"n_supp": n_supp, **change}, seed=seed * 1009 + step + 1)
            values[name].append(res.estimate ** 2)
            errors[name].append(rel_err(res.estimate ** 2, exact))
        log({"pair": step, "client_i": i, "client_j": j, "otdd": exact,
             **{f"{r}/rel_err": errors[r][-1] for r in rows}}, step)
    out = {}
    for name in rows:
        out[f"{name}/rel_err_median"] = float(np.median(errors[name]))
        out[f"{name}/rel_err_max"] = float(np.max(errors[name]))
        out[f"{name}/spearman"] = float(spearmanr(values[name], exact_all).statistic)
    return out
