"""MCM's tables (mcm_mini, mcm_mini_ablation, mcm_mini_pilot): every detector of a run resolves to
the intended ablation and to mcm_mini's settings otherwise, the built models have the masks the
row names (counted here), the capped fitted rows, and claims and controls that name real sub-rows."""
import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from common.data import adbench
from common.reproduce.claims import claim_texts
from methods.mcm import MCM, MCM_ROWS, build, detector_factory, table_split
from methods.mcm.model import FixedMasks, MaskGenerator

needs_adbench = pytest.mark.skipif(not (adbench.SHARED / adbench.TABLES["satellite"][0]).exists(),
                                   reason="ADBench Classical tables not in ../shared/data")

# what each ablation detector changes from MCM, written out by hand
ABLATION = {
    "mcm": dict(num_masks=15, lambda_div=5.0, masking="learned", diversity_on="masks"),
    "mcm_no_div": dict(num_masks=15, lambda_div=0.0, masking="learned", diversity_on="masks"),
    "mcm_k1": dict(num_masks=1, lambda_div=0.0, masking="learned", diversity_on="masks"),
    "mcm_k5": dict(num_masks=5, lambda_div=5.0, masking="learned", diversity_on="masks"),
    "mcm_k30": dict(num_masks=30, lambda_div=5.0, masking="learned", diversity_on="masks"),
    "random_masks": dict(num_masks=15, lambda_div=0.0, masking="random", diversity_on="masks"),
    "mcm_logits": dict(num_masks=15, lambda_div=5.0, masking="learned", diversity_on="logits"),
    "ae": dict(num_masks=1, lambda_div=0.0, masking="none", diversity_on="masks"),
}


def test_ablation_detectors_change_only_their_own_keys(compose_cfg):
    cfg = compose_cfg(["experiment=mcm_mini_ablation"])
    assert list(cfg.method.detectors) == list(cfg.table.sub_rows)
    for kind in [*cfg.method.detectors, "ae"]:
        det = detector_factory(cfg, seed=0, kind=kind)()
        got = {k: getattr(det, k) for k in ABLATION[kind]}
        assert got == ABLATION[kind], kind
        assert (det.hidden_dim, det.latent_dim, det.epochs) == (128, 64, 100), kind
    assert set(MCM_ROWS) >= set(ABLATION)


def test_ablation_rows_build_the_masks_they_name(compose_cfg):
    cfg = compose_cfg(["experiment=mcm_mini_ablation"])
    d = 9
    for kind in cfg.method.detectors:
        det = detector_factory(cfg, seed=0, kind=kind)()
        model = det.build_model(d, torch.Generator().manual_seed(0))
        k = ABLATION[kind]["num_masks"]
        assert isinstance(model, MCM)
        assert isinstance(model.mask_generator, FixedMasks if kind == "random_masks" else MaskGenerator), kind
        x_hat, masks = model(torch.randn(4, d))
        assert x_hat.shape == masks.shape == (4, k, d), kind
        if kind == "random_masks":
            # each fixed mask is binary, the same for every row of x, and hides round(0.5 · 9) = 4 cells
            assert set(masks.unique().tolist()) == {0.0, 1.0} and (masks == masks[:1]).all()
            assert (masks[0] == 0).sum(-1).tolist() == [4] * k
        else:
            assert ((masks > 0) & (masks < 1)).all(), kind      # soft sigmoid masks


def test_headline_and_ablation_share_model_and_schedule(compose_cfg):
    mini, abl = compose_cfg(["experiment=mcm_mini"]), compose_cfg(["experiment=mcm_mini_ablation"])
    strip = lambda c: {k: v for k, v in OmegaConf.to_container(c.method.model).items()}   # noqa: E731
    assert strip(mini) == strip(abl)
    assert mini.trainer.epochs == abl.trainer.epochs and mini.trainer.batch_size == abl.trainer.batch_size
    assert set(abl.dataset.tables) <= set(mini.dataset.tables)
    assert build(mini).num_features == mini.dataset.num_features[mini.dataset.tables[0]]


def test_pilot_is_a_tuning_table_on_validation_data(compose_cfg):
    cfg = compose_cfg(["experiment=mcm_mini_pilot"])
    assert cfg.table.purpose == "tuning" and cfg.table.split == "val" and cfg.eval.on == "val"
    for name in ("mcm_mini", "mcm_mini_ablation"):
        rep = compose_cfg([f"experiment={name}"])
        assert rep.eval.on == "test" and not set(rep.table.seeds) & set(cfg.table.seeds)
        assert list(rep.tuned_on.seeds) == list(cfg.table.seeds) and rep.tuned_on.split == "val"


@needs_adbench
def test_capped_fitted_rows_are_a_seeded_subsample_and_eval_is_untouched():
    x, y = adbench.load_adbench("satellite")
    full = adbench.one_class_splits(x, y, seed=4)
    x_fit, x_test, y_test = table_split("satellite", max_train=1000, seed=4, source="adbench")
    assert x_fit.shape == (1000, 36)
    np.testing.assert_array_equal(x_test, full["test"][0])
    np.testing.assert_array_equal(y_test, full["test"][1])
    rows = {tuple(r): i for i, r in enumerate(full["fit"])}
    picked = [rows[tuple(r)] for r in x_fit]                      # every kept row is a fitted row ...
    assert picked == sorted(picked) and len(set(picked)) == 1000  # ... kept once, in file order
    assert not np.array_equal(table_split("satellite", max_train=1000, seed=5, source="adbench")[0], x_fit)
    x_fit_v, x_val, y_val = table_split("satellite", max_train=1000, seed=4, on="val", source="adbench")
    np.testing.assert_array_equal(x_fit_v, x_fit)                  # val mode fits the same rows
    np.testing.assert_array_equal(x_val, full["val"][0])


@pytest.mark.parametrize("experiment", ["mcm_mini", "mcm_mini_ablation"])
def test_claims_and_controls_name_sub_rows_and_metrics(compose_cfg, experiment):
    cfg = compose_cfg([f"experiment={experiment}"])
    claims = claim_texts(cfg)
    assert claims
    for claim in claims:
        for row, metric in re.findall(r"([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)", claim):
            assert row in cfg.table.sub_rows, claim
            assert metric in cfg.table.metrics or metric.startswith("wilcoxon_p_"), claim
            if metric.startswith("wilcoxon_p_"):
                assert metric.removeprefix("wilcoxon_p_") in cfg.table.sub_rows, claim
    for row, controls in (cfg.table.get("controls") or {}).items():
        assert row in cfg.table.sub_rows and set(controls) <= set(cfg.table.sub_rows)
