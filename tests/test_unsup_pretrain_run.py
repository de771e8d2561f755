"""methods/unsup_pretrain: run(cfg, ctx) for each experiment at toy sizes, the sweeps' metrics, and
the tables' configs (rows, sub-rows, controls)."""
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from common.config import UserError
from methods.unsup_pretrain import FactorModel, build, run
from methods.unsup_pretrain.experiments import (GMM_ROWS, crossovers, factor_experiment, rate_curves, rate_metrics,
                                                unlabeled_grid)


def ctx_for(cfg, tmp_path):
    return SimpleNamespace(seed=int(cfg.seed), run_dir=tmp_path, hw=SimpleNamespace(is_main=True))


TOY_RATES = ["method.experiment=rates", "method.replicates=3", "dataset.task.dim=10", "dataset.task.rank=2",
             "dataset.task.spike=4.0", "method.rates.labeled=[40,80,160]", "method.rates.unlabeled_min=4",
             "method.rates.doublings=7", "method.rates.slope_labeled=160", "method.rates.slope_min_unlabeled=4",
             "method.rates.slope_max_unlabeled=128",
             "method.rates.n_boot=50"]


def test_the_rates_run_reports_every_metric_and_writes_its_figures(compose_cfg, tmp_path):
    cfg = compose_cfg(["method=unsup_pretrain", *TOY_RATES])
    metrics = run(cfg, ctx_for(cfg, tmp_path))
    for row in ("pretrain", "pretrain_shuffled", "pretrain_labeled_only"):
        for key in ("slope_m", "slope_m_low", "slope_m_high", "complexity", "crossed", "crossover_slope"):
            assert f"{row}/{key}" in metrics
    assert metrics["pretrain/slope_m_low"] <= metrics["pretrain/slope_m"] <= metrics["pretrain/slope_m_high"]
    assert metrics["pretrain/slope_m"] < -0.5 and metrics["ols/complexity"] > metrics["pretrain/complexity"]
    assert {"excess_vs_m.png", "crossover_m_star.png", "rate_curves.json"} <= {p.name for p in tmp_path.iterdir()}
    curves = json.loads((tmp_path / "rate_curves.json").read_text())
    assert np.asarray(curves["pretrain"]).shape == (3, 8, 3) and curves["unlabeled"] == unlabeled_grid(4, 7)


def test_the_gmm_run_reports_every_row(compose_cfg, tmp_path):
    cfg = compose_cfg(["method=unsup_pretrain", "dataset=latent_mixture", "method.experiment=gmm",
                       "method.replicates=1", "dataset.task.dim=6", "method.gmm.unlabeled=300",
                       "method.gmm.test_points=500", "method.gmm.em_inits=1"])
    metrics = run(cfg, ctx_for(cfg, tmp_path))
    assert set(metrics) == {f"{row}/excess_error" for row in GMM_ROWS} | {f"{row}/error" for row in (*GMM_ROWS, "bayes")}
    for row in GMM_ROWS:
        assert metrics[f"{row}/excess_error"] == pytest.approx(metrics[f"{row}/error"] - metrics["bayes/error"])


def test_an_experiment_that_does_not_fit_the_dataset_is_refused(compose_cfg, tmp_path):
    cfg = compose_cfg(["method=unsup_pretrain", "method.experiment=gmm"])          # the factor dataset
    with pytest.raises(UserError, match="GaussianMixtureTask"):
        run(cfg, ctx_for(cfg, tmp_path))
    cfg = compose_cfg(["method=unsup_pretrain", "method.experiment=pca"])
    with pytest.raises(UserError, match="method.experiment"):
        run(cfg, ctx_for(cfg, tmp_path))


def test_build_draws_the_instance_from_the_run_seed(compose_cfg):
    a = build(compose_cfg(["method=unsup_pretrain", "seed=3"]))
    b = FactorModel(100, 3, 1.5, seed=3)
    np.testing.assert_array_equal(a.loadings, b.loadings)


def test_the_factor_sweep_is_seeded_and_paired():
    m = FactorModel(15, 2, 2.0, seed=0)
    one = factor_experiment(m, labeled=30, unlabeled=300, replicates=2, seed=5)
    assert one == factor_experiment(m, labeled=30, unlabeled=300, replicates=2, seed=5)
    assert one != factor_experiment(m, labeled=30, unlabeled=300, replicates=2, seed=6)
    # labeled_only with m = n unlabeled points equal to the labeled ones is pretrain on them
    assert one["pretrain/excess"] < one["pretrain_shuffled/excess"]


def test_crossovers_and_rate_metrics_on_synthetic_curves():
    """Curves built to a known law: excess(m) = oracle + 8/m per replicate, OLS flat at 0.5·(n/100)⁻¹:
    slope_m is −1 exactly, m* solves 8/m + oracle = OLS."""
    labeled, unlabeled = [100, 200, 400], unlabeled_grid(2, 9)
    m = np.asarray(unlabeled, dtype=float)
    oracle = np.full((3, 4), 0.01)
    ols_level = 0.5 * 100 / np.asarray(labeled, dtype=float)
    curves = {"pretrain": 0.01 + 8 / m[None, :, None] * np.ones((3, 1, 4)),
              "pretrain_shuffled": np.full((3, len(m), 4), 2.0),
              "pretrain_labeled_only": np.full((3, 4), 0.02), "ols": np.repeat(ols_level[:, None], 4, axis=1),
              "oracle": oracle}
    out = rate_metrics(curves, labeled=labeled, unlabeled=unlabeled, slope_labeled=400, slope_min_unlabeled=2,
                       slope_max_unlabeled=1024, n_boot=20, level=0.95, seed=0)
    # a curve that is flat below m = 16 and a power law above: the fit window sees only the power law
    curves["pretrain"][2, :3] = curves["pretrain"][2, 3]
    windowed = rate_metrics(curves, labeled=labeled, unlabeled=unlabeled, slope_labeled=400, slope_min_unlabeled=16,
                            slope_max_unlabeled=1024, n_boot=20, level=0.95, seed=0)
    assert windowed["pretrain/slope_m"] == pytest.approx(-1.0)
    assert out["pretrain/slope_m"] == pytest.approx(-1.0) and out["pretrain/slope_m_low"] == pytest.approx(-1.0)
    assert out["pretrain/crossed"] == 1.0 and out["pretrain_shuffled/crossed"] == 0.0
    m_star = crossovers(unlabeled, curves["pretrain"], curves["ols"])
    # between grid points the crossover is interpolated in log-log, so compare with the grid's bracket
    exact = 8 / (ols_level - 0.01)
    assert np.all((m_star >= exact / 2) & (m_star <= exact * 2))
    assert math.isnan(out["pretrain_shuffled/crossover_slope"])
    assert out["ols/complexity"] == pytest.approx(50.0)
    assert out["pretrain_labeled_only/complexity"] == pytest.approx(np.mean(0.02 * np.asarray(labeled)))


def test_rate_curves_shapes_and_nesting():
    m = FactorModel(8, 2, 4.0, seed=1)
    curves = rate_curves(m, labeled=[30, 60], unlabeled=[8, 16, 32], replicates=2, seed=0)
    assert curves["pretrain"].shape == (2, 3, 2) and curves["ols"].shape == (2, 2)
    assert np.all(curves["pretrain"] > 0) and np.all(curves["oracle"] > 0)


@pytest.mark.parametrize("name", ["unsup_pretrain_mini", "unsup_pretrain_mini_rates", "unsup_pretrain_mini_gmm"])
def test_the_tables_declare_their_sub_rows_and_controls(compose_cfg, name):
    cfg = compose_cfg([f"experiment={name}"])
    sub_rows = set(cfg.table.sub_rows)
    for row, stand_ins in cfg.table.controls.items():
        assert {row, *stand_ins} <= sub_rows
    assert cfg.tuned_on.split == "none" and not cfg.tuned_on.seeds
    assert not set(cfg.table.seeds) & {10, 11, 12, 100, 101, 102}
