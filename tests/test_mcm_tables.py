"""MCM's supporting tables (mcm_mini_ablation, mcm_mini_large): every row resolves to the
intended ablation and to mcm_mini's settings otherwise, the built models have the masks the row
names (counted here), the larger tables' capped training halves, and claims that name real rows."""
import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from common.data import tabular
from common.reproduce.claims import claim_texts
from methods.mcm import MCM, build, detector_factory, table_split
from methods.mcm.model import FixedMasks, MaskGenerator

needs_mlbench = pytest.mark.skipif(not (tabular.SYSTEM / "Glass.rda").exists(),
                                   reason="r-cran-mlbench not installed (sudo apt-get install r-cran-mlbench)")

# the keys each ablation row changes from the table's `mcm` row, written out by hand
ABLATION_DIFFS = {
    "mcm_k1": {"method.model.num_masks": 1, "method.model.lambda_div": 0.0},
    "mcm_k5": {"method.model.num_masks": 5},
    "mcm_k30": {"method.model.num_masks": 30},
    "random_masks": {"method.model.masking": "random", "method.model.lambda_div": 0.0},
    "mcm_logits": {"method.model.diversity_on": "logits"},
}


def flat(cfg) -> dict:
    """Dotted keys of the settings a run reads (claims, table and paper left out)."""
    out = {}

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value

    settings = OmegaConf.to_container(cfg, resolve=True)
    walk({k: v for k, v in settings.items() if k not in ("paper", "claims", "known_failures", "table",
                                                          "tuned_on", "run_name", "run_dir", "seed")}, "")
    return out


def row_cfg(compose_cfg, experiment, row):
    base = compose_cfg([f"experiment={experiment}"])
    return compose_cfg([f"experiment={experiment}", *base.table.rows[row]])


def test_ablation_rows_change_only_their_own_keys(compose_cfg):
    ref = flat(row_cfg(compose_cfg, "mcm_mini_ablation", "mcm"))
    headline = flat(row_cfg(compose_cfg, "mcm_mini", "mcm"))
    assert ref == headline       # the ablation's reference row is mcm_mini's mcm row
    for row, expected in ABLATION_DIFFS.items():
        got = flat(row_cfg(compose_cfg, "mcm_mini_ablation", row))
        changed = {k: v for k, v in got.items() if ref.get(k) != v}
        assert changed == expected, row
    assert set(compose_cfg(["experiment=mcm_mini_ablation"]).table.rows) == {"mcm", *ABLATION_DIFFS}


def test_ablation_rows_build_the_masks_they_name(compose_cfg):
    d = 9
    for row, k, kind in [("mcm", 15, MaskGenerator), ("mcm_k1", 1, MaskGenerator), ("mcm_k5", 5, MaskGenerator),
                         ("mcm_k30", 30, MaskGenerator), ("random_masks", 15, FixedMasks),
                         ("mcm_logits", 15, MaskGenerator)]:
        cfg = row_cfg(compose_cfg, "mcm_mini_ablation", row)
        det = detector_factory(cfg, seed=0)()
        model = det.build_model(d, torch.Generator().manual_seed(0))
        assert isinstance(model, MCM) and isinstance(model.mask_generator, kind), row
        x = torch.randn(4, d)
        x_hat, masks = model(x)
        assert x_hat.shape == masks.shape == (4, k, d), row
        assert (det.hidden_dim, det.latent_dim, det.epochs) == (128, 64, 100), row
        assert det.diversity_on == ("logits" if row == "mcm_logits" else "masks"), row
        if row == "random_masks":
            # each fixed mask is binary, the same for every row of x, and hides round(0.5 · 9) = 4 cells
            assert set(masks.unique().tolist()) == {0.0, 1.0}
            assert (masks == masks[:1]).all()
            assert (masks[0] == 0).sum(-1).tolist() == [4] * k
        else:
            assert ((masks > 0) & (masks < 1)).all(), row      # soft sigmoid masks


def test_k1_row_is_legal_only_without_diversity(compose_cfg):
    cfg = row_cfg(compose_cfg, "mcm_mini_ablation", "mcm_k1")
    assert cfg.method.model.lambda_div == 0.0
    cfg.method.model.lambda_div = 5.0
    with pytest.raises(Exception, match="num_masks >= 3"):   # hydra wraps the detector's ValueError
        detector_factory(cfg, seed=0)()


def test_large_table_config(compose_cfg):
    cfg = compose_cfg(["experiment=mcm_mini_large"])
    assert list(cfg.dataset.tables) == ["satellite", "shuttle"]
    assert OmegaConf.to_container(cfg.dataset.max_train) == {"satellite": 2000, "shuttle": 2000}
    model = build(cfg)
    assert model.num_features == 36 and model.num_masks == 15
    # mcm_mini's model and schedule, only the tables differ
    mini = flat(compose_cfg(["experiment=mcm_mini"]))
    large = flat(cfg)
    assert {k for k in large if large[k] != mini.get(k)} == {"dataset.tables", "dataset.max_train.satellite",
                                                                "dataset.max_train.shuttle"}


@needs_mlbench
def test_capped_training_half_is_a_fixed_subsample_of_normal_rows():
    x, y = tabular.load_tabular("satellite")
    full_train, full_test, full_y = tabular.one_class_split(x, y, seed=0)
    x_train, x_test, y_test = table_split("satellite", max_train=2000)
    assert x_train.shape == (2000, 36) and len(full_train) == (6435 - 2036) // 2
    np.testing.assert_array_equal(x_test, full_test)             # the test half is untouched
    assert int(y_test.sum()) == 2036 and len(y_test) == 6435 - len(full_train)
    rows = {tuple(r): i for i, r in enumerate(full_train)}
    picked = [rows[tuple(r)] for r in x_train]                    # every kept row is a training row ...
    assert picked == sorted(picked) and len(set(picked)) == 2000  # ... kept once, in file order
    np.testing.assert_array_equal(table_split("satellite", max_train=2000)[0], x_train)  # and fixed
    assert not np.array_equal(table_split("satellite", max_train=2000, split_seed=1)[0], x_train)


@pytest.mark.parametrize("experiment", ["mcm_mini", "mcm_mini_ablation", "mcm_mini_large"])
def test_claims_name_rows_and_metrics_of_their_table(compose_cfg, experiment):
    cfg = compose_cfg([f"experiment={experiment}"])
    claims = claim_texts(cfg)
    assert claims
    for claim in claims:
        refs = re.findall(r"([a-z0-9_]+)\.([a-z0-9_]+)", claim)
        assert len(refs) == 2, claim
        for row, metric in refs:
            assert row in cfg.table.rows and metric in cfg.table.metrics, claim
