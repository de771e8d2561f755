import ast

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from common.config import CONFIG_DIR, UserError, check_choices, choices, evaluate_claim

EXPERIMENTS = choices("experiment")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes(compose_cfg, name):
    cfg = compose_cfg([f"experiment={name}"])
    assert name.startswith(cfg.method.name + "_")
    assert cfg.trainer.max_steps >= 0
    for claim in list(cfg.claims) + [k.claim for k in cfg.known_failures]:  # name only rows the table runs
        rows = {n.value.id for n in ast.walk(ast.parse(claim, mode="eval")) if isinstance(n, ast.Attribute)}
        assert rows <= set(cfg.table.rows), (claim, rows)
    for row, overrides in (cfg.table.rows.items() if cfg.table else []):  # every row's overrides compose
        assert compose_cfg([f"experiment={name}", *overrides]).method.name == cfg.method.name, row


@pytest.mark.parametrize("hardware", choices("hardware"))
def test_every_hardware_composes(compose_cfg, hardware):
    cfg = compose_cfg(["method=simclr", f"hardware={hardware}"])
    assert cfg.hardware.precision in ("fp32", "bf16", "fp16")


def test_slurm_sets_the_submitit_launcher(compose_cfg):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["method=simclr", "hardware=slurm"], return_hydra_config=True)
    assert "submitit" in cfg.hydra.launcher._target_.lower()


def test_misspelt_key_is_an_error(compose_cfg):
    with pytest.raises(ConfigCompositionException, match="tranier"):
        compose_cfg(["method=simclr", "tranier.max_steps=3"])
    cfg = compose_cfg(["method=simclr"])
    with pytest.raises((ConfigAttributeError, ConfigKeyError)):
        _ = cfg.trainer.max_stepz


def test_unknown_choice_lists_available():
    with pytest.raises(UserError, match="simclr") as err:
        check_choices(["method=nope"])
    assert err.value.exit_code == 2


def test_claims_evaluate_on_table():
    table = {"a": {"x": 1.0}, "b": {"x": 2.0}}
    assert evaluate_claim("a.x < b.x", table)[0]
    assert not evaluate_claim("a.x > b.x - 0.5", table)[0]
    assert evaluate_claim("a.x >= 0.5 * b.x", table) == (True, "1 >= 1")
    assert evaluate_claim("abs(a.x - b.x) <= 1", table) == (True, "1 <= 1")
    assert not evaluate_claim("abs(a.x - b.x) < 0.5", table)[0]
    with pytest.raises(UserError):
        evaluate_claim("max(a.x, b.x) < 3", table)
    with pytest.raises(UserError):
        evaluate_claim("__import__('os').x < 1", table)
    with pytest.raises(UserError, match="c.x"):
        evaluate_claim("c.x < 1", table)


def test_headline_selects_only_the_method_tier_table():
    from common.reproduce import experiments
    assert "care_mini_sweep" in experiments("care", "mini")
    assert experiments("care", "mini", headline=True) == ["care_mini"]
    assert "care_mini" not in experiments("care", "paper", headline=True)
