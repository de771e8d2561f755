"""The three sweeps a run performs, as plain functions of an instance and sizes. Each averages R
replicate draws (their own streams, `replicate_rng`) and returns metrics named `<procedure>/<metric>`,
so that one run per seed reports every procedure on the same draws (paired)."""
from __future__ import annotations

import numpy as np

from common.eval.scaling import bootstrap_power_law, crossover, fit_power_law
from methods.unsup_pretrain.factor import (FactorModel, composite_predictor, ols, oracle_predictor,
                                           posterior_mean_features, pretrain_predictor, ridge_loo, shuffle_columns)
from methods.unsup_pretrain.mixture import (GaussianMixtureTask, error_rate, logistic_classifier,
                                            pretrain_em_classifier)
from methods.unsup_pretrain.moments import prefix_ppca

FACTOR_ROWS = ("pretrain", "pretrain_labeled_only", "pretrain_shuffled", "ridge", "oracle")
RATE_ROWS = ("pretrain", "pretrain_shuffled", "pretrain_labeled_only", "ols", "oracle")
GMM_ROWS = ("pretrain_em", "pretrain_em_shuffled", "pretrain_em_labeled_only", "logistic")


def replicate_rng(seed: int, replicate: int) -> np.random.Generator:
    """The draws of replicate `replicate` of run seed `seed` (a stream apart from the instance's)."""
    return np.random.default_rng([int(seed), int(replicate)])


def factor_experiment(model: FactorModel, *, labeled: int, unlabeled: int, replicates: int, seed: int) -> dict[str, float]:
    """One (n, m): `<row>/excess` averaged over replicates for MLE + ERM (pretrain), the same on the
    labeled x alone (labeled_only: the budget-matched control), on column-shuffled unlabeled x
    (shuffled: structure gone), ridge on x with α by leave-one-out, and ERM on the true posterior (oracle)."""
    excess = {row: [] for row in FACTOR_ROWS}
    alphas = []
    for rep in range(replicates):
        rng = replicate_rng(seed, rep)
        x, y = model.sample(labeled, rng)
        x_unlabeled, _ = model.sample(unlabeled, rng)
        shuffled = shuffle_columns(x_unlabeled, rng)
        w, c, alpha = ridge_loo(x, y)
        alphas.append(alpha)
        fits = {"pretrain": pretrain_predictor(x_unlabeled, x, y, model.rank),
                "pretrain_labeled_only": pretrain_predictor(x, x, y, model.rank),
                "pretrain_shuffled": pretrain_predictor(shuffled, x, y, model.rank),
                "ridge": (w, c), "oracle": oracle_predictor(model, x, y)}
        for row, (w, c) in fits.items():
            excess[row].append(model.excess_risk(w, c))
    out = {f"{row}/excess": float(np.mean(v)) for row, v in excess.items()}
    out["ridge/log10_alpha"] = float(np.mean(np.log10(alphas)))
    return out


def unlabeled_grid(smallest: int, doublings: int) -> list[int]:
    """m ∈ {smallest · 2^k : k = 0..doublings}."""
    return [int(smallest) * 2 ** k for k in range(int(doublings) + 1)]


def rate_curves(model: FactorModel, *, labeled: list[int], unlabeled: list[int], replicates: int, seed: int,
                device: str | None = None) -> dict[str, np.ndarray]:
    """Excess risks on a grid, per replicate: pretrain and pretrain_shuffled (n, m, R); pretrain_labeled_only,
    ols and oracle (n, R). Labeled sets are nested prefixes of one labeled draw, unlabeled sets nested
    prefixes of one unlabeled draw (so curves over n and m are paired within a replicate)."""
    labeled, unlabeled = sorted(int(n) for n in labeled), sorted(int(m) for m in unlabeled)
    curves = {"pretrain": np.zeros((len(labeled), len(unlabeled), replicates)),
              "pretrain_shuffled": np.zeros((len(labeled), len(unlabeled), replicates))}
    curves |= {row: np.zeros((len(labeled), replicates)) for row in ("pretrain_labeled_only", "ols", "oracle")}
    for rep in range(replicates):
        rng = replicate_rng(seed, rep)
        x_all, y_all = model.sample(labeled[-1], rng)
        x_unlabeled, _ = model.sample(unlabeled[-1], rng)
        pretrained = {"pretrain": prefix_ppca(x_unlabeled, unlabeled, model.rank, device),
                      "pretrain_shuffled": prefix_ppca(shuffle_columns(x_unlabeled, rng), unlabeled, model.rank, device)}
        for i, n in enumerate(labeled):
            x, y = x_all[:n], y_all[:n]
            for row, fits in pretrained.items():
                for j, (loadings, noise_var, mean) in enumerate(fits):
                    w_phi, c_phi = ols(posterior_mean_features(x, loadings, noise_var, mean), y)
                    curves[row][i, j, rep] = model.excess_risk(*composite_predictor(loadings, noise_var, mean, w_phi, c_phi))
            curves["pretrain_labeled_only"][i, rep] = model.excess_risk(*pretrain_predictor(x, x, y, model.rank))
            curves["ols"][i, rep] = model.excess_risk(*ols(x, y))
            curves["oracle"][i, rep] = model.excess_risk(*oracle_predictor(model, x, y))
    return curves


def crossovers(unlabeled: list[int], pretrain: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """m*(n): per labeled size, where the mean pretrain curve (n, m, R) reaches the mean baseline (n, R)."""
    mean_curve, level = pretrain.mean(axis=2), baseline.mean(axis=1)
    return np.array([crossover(unlabeled, mean_curve[i], np.full(len(unlabeled), level[i]))
                     for i in range(len(level))])


def rate_metrics(curves: dict[str, np.ndarray], *, labeled: list[int], unlabeled: list[int], slope_labeled: int,
                 slope_min_unlabeled: int, slope_max_unlabeled: int, n_boot: int, level: float,
                 seed: int) -> dict[str, float]:
    """slope_m (with slope_m_low/high): the exponent of excess(m) − oracle in m at n = `slope_labeled`,
    `slope_min_unlabeled` <= m <= `slope_max_unlabeled` (bootstrap over replicates); complexity: mean over n of n · excess (at the
    largest m); crossed: the share of n whose crossover m*(n) with ols is bracketed; crossover_slope:
    the exponent of m*(n) (nan with fewer than 2 crossovers)."""
    labeled, unlabeled = sorted(labeled), sorted(unlabeled)
    i_slope = labeled.index(int(slope_labeled))
    m_fit = [j for j, m in enumerate(unlabeled) if slope_min_unlabeled <= m <= slope_max_unlabeled]
    sizes = np.asarray(labeled, dtype=np.float64)
    out: dict[str, float] = {}
    for row in ("pretrain", "pretrain_shuffled", "pretrain_labeled_only"):
        curve = curves[row]
        if curve.ndim == 2:                                   # labeled_only: the same at every m
            curve = np.repeat(curve[:, None, :], len(unlabeled), axis=1)
        gap = curve[i_slope][m_fit] - curves["oracle"][i_slope][None, :]           # (k, R)
        fit = bootstrap_power_law(np.asarray(unlabeled, dtype=np.float64)[m_fit], gap, n_boot=n_boot, level=level, seed=seed)
        out |= {f"{row}/slope_m": fit["exponent"], f"{row}/slope_m_low": fit["low"], f"{row}/slope_m_high": fit["high"]}
        out[f"{row}/complexity"] = float(np.mean(sizes * curve[:, -1, :].mean(axis=1)))
        m_star = crossovers(unlabeled, curve, curves["ols"])
        found = np.isfinite(m_star)
        out[f"{row}/crossed"] = float(found.mean())
        out[f"{row}/crossover_slope"] = (fit_power_law(sizes[found], m_star[found])[0] if found.sum() >= 2
                                         else float("nan"))
        for n, m in zip(labeled, m_star):
            out[f"{row}/m_star_n{n}"] = float(m)
    for row in ("ols", "oracle"):
        out[f"{row}/complexity"] = float(np.mean(sizes * curves[row].mean(axis=1)))
    return out


def gmm_experiment(task: GaussianMixtureTask, *, labeled: int, unlabeled: int, test_points: int, replicates: int,
                   seed: int, em_inits: int, logistic_c: float, cv_cs: int, cv_folds: int) -> dict[str, float]:
    """`<row>/excess_error`: test error minus the Bayes rule's error on the same test points (and
    `<row>/error`, with `bayes/error` the Bayes rule's own), averaged
    over replicates: EM on unlabeled x then logistic regression on the responsibilities (pretrain_em),
    the same on column-shuffled unlabeled x and on the labeled x alone, and logistic regression on x."""
    errors = {row: [] for row in (*GMM_ROWS, "bayes")}
    for rep in range(replicates):
        rng = replicate_rng(seed, rep)
        x, y, _ = task.sample(labeled, rng)
        x_unlabeled, _, _ = task.sample(unlabeled, rng)
        shuffled = shuffle_columns(x_unlabeled, rng)
        x_test, y_test, _ = task.sample(test_points, rng)
        em_seed = int(rng.integers(2 ** 31))
        classifiers = {
            "pretrain_em": pretrain_em_classifier(x_unlabeled, x, y, task.components, em_inits=em_inits, c=logistic_c, seed=em_seed),
            "pretrain_em_shuffled": pretrain_em_classifier(shuffled, x, y, task.components, em_inits=em_inits, c=logistic_c, seed=em_seed),
            "pretrain_em_labeled_only": pretrain_em_classifier(x, x, y, task.components, em_inits=em_inits, c=logistic_c, seed=em_seed),
            "logistic": logistic_classifier(x, y, cs=cv_cs, folds=cv_folds)}
        errors["bayes"].append(error_rate(task.bayes_predict(x_test), y_test))
        for row, predict in classifiers.items():
            errors[row].append(error_rate(predict(x_test), y_test))
    bayes = np.asarray(errors["bayes"])
    out = {f"{row}/excess_error": float(np.mean(np.asarray(errors[row]) - bayes)) for row in GMM_ROWS}
    return out | {f"{row}/error": float(np.mean(v)) for row, v in errors.items()}
