"""mixreg_transformer's mini tables: the learning rate is chosen on validation prompts of a seed no
reported table uses (issue #15's rule), the sweep trains exactly the headline's model, and every
claim names a row that a run reports."""
import ast
from functools import lru_cache

import pytest
import torch
from hydra import compose, initialize_config_dir

from common.config import CONFIG_DIR
from common.reproduce.claims import claim_texts
from methods.mixreg_transformer import MixtureOfRegressions, stages

PROCEDURES = {"transformer", "posterior_mean", "argmin", "ridge", "ols", "zero", "em"}
REPORTED = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("mixreg_transformer_mini*.yaml")
                  if p.stem != "mixreg_transformer_mini_tuning")


@lru_cache(maxsize=None)
def _compose(overrides: tuple):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.fixture
def compose_cfg():
    """compose(overrides) -> the config scripts/train.py would see, each composed once per session
    (composing dominates this file's runtime)."""
    return lambda overrides: _compose(tuple(overrides))


def test_the_reported_tables_are_the_four_expected():
    assert REPORTED == ["mixreg_transformer_mini", "mixreg_transformer_mini_m20",
                        "mixreg_transformer_mini_samples", "mixreg_transformer_mini_sigma0"]


def test_tuning_sweeps_the_learning_rate_on_validation_prompts(compose_cfg):
    tune = compose_cfg(["experiment=mixreg_transformer_mini_tuning"])
    assert tune.table.purpose == "tuning" and not tune.claims
    assert tune.dataset.eval_split == "val"
    lrs = set()
    for overrides in tune.table.rows.values():
        cfg = compose_cfg(["experiment=mixreg_transformer_mini_tuning", *overrides])
        assert cfg.dataset.eval_split == "val"
        lrs.add(cfg.trainer.optimizer.lr)
    assert len(lrs) == len(tune.table.rows) >= 3


@pytest.mark.parametrize("name", REPORTED)
def test_reported_tables_never_use_a_tuning_seed(compose_cfg, name):
    """The supporting tables were tuned by the sweep (seed 10); the headline by its pilot on
    seeds 10-12 (README), which include the sweep's seed."""
    tune = compose_cfg(["experiment=mixreg_transformer_mini_tuning"])
    cfg = compose_cfg([f"experiment={name}"])
    tuned = [10, 11, 12] if name == "mixreg_transformer_mini" else list(tune.table.seeds)
    assert dict(cfg.tuned_on) == {"seeds": tuned, "split": "val"}
    assert set(tune.table.seeds) <= set(tuned) and not set(cfg.table.seeds) & set(tuned)
    assert not {100, 101, 102} & set(tune.table.seeds)           # the held-out seeds
    assert cfg.dataset.eval_split == "test"


def test_the_sweep_trains_the_supporting_tables_model(compose_cfg):
    """Everything the transformer sees is the supporting tables' (the m = 20 table stands for them),
    the learning rate aside; the chosen rate is one the sweep tried (the sweep's EM is cut: EM is not
    tuned). The headline trains the wider model its own pilot chose (README)."""
    head = compose_cfg(["experiment=mixreg_transformer_mini_m20"])
    tune = compose_cfg(["experiment=mixreg_transformer_mini_tuning"])
    for key in ("model",):
        assert head.method[key] == tune.method[key]
    for key in ("prompt_length", "train_prompts", "eval_prompts"):
        assert head.dataset[key] == tune.dataset[key]
    assert {k: v for k, v in head.dataset.mixture.items() if k != "num_components"} == \
           {k: v for k, v in tune.dataset.mixture.items() if k != "num_components"}
    drop = {"optimizer"}
    assert {k: v for k, v in head.trainer.items() if k not in drop} == \
           {k: v for k, v in tune.trainer.items() if k not in drop}
    tried = {compose_cfg(["experiment=mixreg_transformer_mini_tuning", *o]).trainer.optimizer.lr
             for o in tune.table.rows.values()}
    assert head.trainer.optimizer.lr in tried


def test_the_headline_trains_the_issues_model(compose_cfg):
    head = compose_cfg(["experiment=mixreg_transformer_mini"])
    assert (head.method.model.width, head.trainer.batch_size) == (64, 64)
    assert head.table.controls.transformer == ["ridge", "zero"]
    assert head.dataset.mixture.draw == "sphere"


def test_validation_prompts_are_not_the_test_prompts():
    mix = MixtureOfRegressions(8, 5, 0.5, seed=10)
    val = stages.test_prompts(mix, 64, 16, seed=10, split="val")[0]
    test = stages.test_prompts(mix, 64, 16, seed=10, split="test")[0]
    assert not torch.isclose(val, test).any()


def _row_names(node):
    """The `row` of every `row.metric` in a claim."""
    return {n.value.id for n in ast.walk(ast.parse(node, mode="eval")) if isinstance(n, ast.Attribute)}


@pytest.mark.parametrize("name", REPORTED)
def test_every_claim_names_a_reported_row(compose_cfg, name):
    cfg = compose_cfg([f"experiment={name}"])
    rows = cfg.table.rows
    reported = PROCEDURES if len(rows) == 1 else {f"{r}_{p}" for r in rows for p in PROCEDURES}
    claims = claim_texts(cfg)
    assert claims
    for claim in claims:
        assert _row_names(claim) <= reported, claim
        for metric in {n.attr for n in ast.walk(ast.parse(claim, mode="eval")) if isinstance(n, ast.Attribute)}:
            assert metric in cfg.table.metrics, (claim, metric)
