"""Unsupervised pretraining's provable advantage: MLE of a latent model on unlabeled data, then ERM on
its posterior, against supervised learning (Ge, Tang, Fan, Jin; ICLR 2024). See README.md."""
from __future__ import annotations

import json

import numpy as np
from hydra.utils import instantiate

from common.config import UserError
from methods.unsup_pretrain.experiments import (factor_experiment, gmm_experiment, rate_curves, rate_metrics,
                                                unlabeled_grid)
from methods.unsup_pretrain.factor import (RIDGE_ALPHAS, FactorModel, composite_predictor, fit_ppca, ols,
                                           oracle_predictor, posterior_mean_features, pretrain_predictor, ridge_loo,
                                           shuffle_columns)
from methods.unsup_pretrain.mixture import GaussianMixtureTask, logistic_classifier, pretrain_em_classifier
from methods.unsup_pretrain.moments import ppca_from_scatter, prefix_ppca
from methods.unsup_pretrain.plots import crossover_vs_labeled, excess_vs_unlabeled

TRAINS_NO_NETWORK = True   # build(cfg) returns the synthetic task (tests/test_build.py builds networks on meta)
EXPERIMENTS = {"factor": FactorModel, "rates": FactorModel, "gmm": GaussianMixtureTask}


def build(cfg):
    """The run's synthetic task (`dataset.task`: a FactorModel or a GaussianMixtureTask), drawn from
    the run seed. Nothing here is trained by gradient: there is no network to build."""
    return instantiate(cfg.dataset.task, seed=int(cfg.seed))


def run(cfg, ctx) -> dict[str, float]:
    """`method.experiment`: 'factor' (one (n, m): excess risks of every procedure), 'rates' (a grid of
    n and m: rates, complexity and crossovers, with figures) or 'gmm' (the mixture instance).
    Metrics are `<procedure>/<metric>`, averaged over `method.replicates` draws of the seed's instance."""
    m = cfg.method
    if m.experiment not in EXPERIMENTS:
        raise UserError(f"method.experiment must be one of {sorted(EXPERIMENTS)}, got '{m.experiment}'", exit_code=2)
    task = build(cfg)
    if not isinstance(task, EXPERIMENTS[m.experiment]):
        raise UserError(f"method.experiment={m.experiment} needs dataset.task to build a "
                        f"{EXPERIMENTS[m.experiment].__name__}, got {type(task).__name__} (dataset={cfg.dataset.name})",
                        exit_code=2)
    replicates = int(m.replicates)
    if m.experiment == "factor":
        return factor_experiment(task, labeled=int(m.factor.labeled), unlabeled=int(m.factor.unlabeled),
                                 replicates=replicates, seed=ctx.seed)
    if m.experiment == "gmm":
        g = m.gmm
        return gmm_experiment(task, labeled=int(g.labeled), unlabeled=int(g.unlabeled), test_points=int(g.test_points),
                              replicates=replicates, seed=ctx.seed, em_inits=int(g.em_inits),
                              logistic_c=float(g.logistic_c), cv_cs=int(g.cv_cs), cv_folds=int(g.cv_folds))
    r = m.rates
    labeled = sorted(int(n) for n in r.labeled)
    unlabeled = unlabeled_grid(r.unlabeled_min, r.doublings)
    curves = rate_curves(task, labeled=labeled, unlabeled=unlabeled, replicates=replicates, seed=ctx.seed,
                         device=r.device)
    if ctx.hw.is_main:   # before the fits: a long sweep's curves are kept even if a fit refuses them
        (ctx.run_dir / "rate_curves.json").write_text(json.dumps(
            {"labeled": labeled, "unlabeled": unlabeled, **{k: v.tolist() for k, v in curves.items()}}))
    metrics = rate_metrics(curves, labeled=labeled, unlabeled=unlabeled, slope_labeled=int(r.slope_labeled),
                           slope_min_unlabeled=int(r.slope_min_unlabeled), slope_max_unlabeled=int(r.slope_max_unlabeled), n_boot=int(r.n_boot), level=float(r.level),
                           seed=ctx.seed)
    if ctx.hw.is_main:
        title = (f"d = {task.dim}, r = {task.rank}, s = {task.spike:g}, σ = {task.noise_std:g}, τ = {task.label_noise:g}; "
                 f"{replicates} replicates (seed {ctx.seed})")
        excess_vs_unlabeled(curves, labeled, unlabeled, ctx.run_dir / "excess_vs_m.png", title, float(r.level), ctx.seed)
        m_star = np.array([metrics[f"pretrain/m_star_n{n}"] for n in labeled])
        crossover_vs_labeled(labeled, m_star, ctx.run_dir / "crossover_m_star.png", title)
    return metrics


__all__ = ["RIDGE_ALPHAS", "FactorModel", "GaussianMixtureTask", "build", "composite_predictor", "factor_experiment",
           "fit_ppca", "gmm_experiment", "logistic_classifier", "ols", "oracle_predictor", "posterior_mean_features",
           "ppca_from_scatter", "prefix_ppca", "pretrain_em_classifier", "pretrain_predictor", "rate_curves",
           "rate_metrics", "ridge_loo", "run", "shuffle_columns", "unlabeled_grid"]
