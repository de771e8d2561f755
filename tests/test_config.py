"""Config composition and the checks that run before anything is built (common/config.py,
common/schema.py): every config composes and validates; bad input is one paragraph, exit 2."""
import ast
import re

import pytest

from common.config import CONFIG_DIR, UserError, check_choices, choices, compose_checked
from common.reproduce.claims import check_controls, claim_spec, claim_texts
from common.reproduce.tables import check_tuned_on, controls_of
from common.schema import nearest, validate
from common.target_types import check_targets

EXPERIMENTS = choices("experiment")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_validates(compose_cfg, name):
    cfg = compose_cfg([f"experiment={name}"])
    assert name.startswith(cfg.method.name + "_")
    validate(cfg)
    check_targets(cfg)   # method/eval values against their _target_ signatures
    claim_rules_hold(name, cfg)
    for claim in claim_texts(cfg):  # name only rows the table runs
        rows = {n.value.id for n in ast.walk(ast.parse(claim, mode="eval")) if isinstance(n, ast.Attribute)}
        # a run may report several rows at once (`<row>/<metric>` metrics, e.g. procedures scored
        # on one trained model); the config declares them in `table.sub_rows`
        assert rows <= set(cfg.table.rows) | set(cfg.table.get("sub_rows") or []), (claim, rows)
    for row, overrides in (cfg.table.rows.items() if cfg.table else []):  # every row's overrides compose
        row_cfg = compose_cfg([f"experiment={name}", *overrides])
        assert row_cfg.method.name == cfg.method.name, row
        validate(row_cfg)
        check_targets(row_cfg)


@pytest.mark.parametrize("hardware", choices("hardware"))
def test_every_hardware_composes(compose_cfg, hardware):
    cfg = compose_cfg(["method=simclr", f"hardware={hardware}"])
    validate(cfg)


def test_slurm_sets_the_submitit_launcher():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["method=simclr", "hardware=slurm"], return_hydra_config=True)
    assert "submitit" in cfg.hydra.launcher._target_.lower()


@pytest.mark.parametrize("override, message", [
    ("trainer.max_steps=abc", "trainer.max_steps must be an integer >= 0, got 'abc'"),
    ("trainer.max_steps=-5", "trainer.max_steps must be an integer >= 0, got -5"),
    ("seed=-3", "seed must be an integer >= 0, got -3"),
    ("trainer.batch_size=0", "trainer.batch_size must be an integer >= 1"),
    ("trainer.optimizer.lr=0", "trainer.optimizer.lr must be a number > 0"),
    ("hardware.precision=fp8", "hardware.precision must be one of fp32, bf16, fp16"),
    ("hardware.kernels=cuda", "hardware.kernels must be one of reference, triton, auto"),
    ("method.model.augment.flip_prob=1.5", "method.model.augment.flip_prob must be >= 0 and <= 1"),
    ("method.model.temperature=0", "method.model.temperature must be > 0"),
])
def test_bad_values_are_named_with_what_is_allowed(override, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as err:
        compose_checked(["method=simclr", override])
    assert err.value.exit_code == 2


def test_misspelt_key_names_the_nearest_existing_keys():
    with pytest.raises(UserError, match=r"unknown key 'trainer.lrr'.*trainer.optimizer.lr") as err:
        compose_checked(["method=simclr", "trainer.lrr=0.1"])
    assert err.value.exit_code == 2
    assert nearest("trainer.max_stepz", ["trainer.max_steps", "seed", "trainer.log_every"])[0] == "trainer.max_steps"


def test_an_added_key_in_a_strict_section_is_refused():
    with pytest.raises(UserError, match=r"unknown key trainer.foo"):
        compose_checked(["method=simclr", "+trainer.foo=1"])


def test_a_sweep_is_checked_on_its_first_value_and_a_missing_method_is_named():
    assert compose_checked(["method=simclr", "seed=0,1"]).seed == 0
    with pytest.raises(UserError, match="no method chosen"):
        compose_checked([])


def test_unknown_choice_lists_available():
    with pytest.raises(UserError, match="simclr") as err:
        check_choices(["method=nope"])
    assert err.value.exit_code == 2
    with pytest.raises(UserError, match="unknown method 'nope'"):
        check_choices(["method=simclr,nope"])


def test_headline_selects_only_the_method_tier_table():
    from common.reproduce import experiments
    assert "care_mini_sweep" in experiments("care", "mini")
    assert experiments("care", "mini", headline=True) == ["care_mini"]
    assert "care_mini" not in experiments("care", "paper", headline=True)


def claim_rules_hold(name, cfg):
    """An experiment config's claims obey the rules reproduce.py checks before the first run: entries
    well formed, tuned_on present and not test, controls name rows it runs; a method's headline
    table marks the paper's own finding (a claim or a known failure). Part of the walk over every
    experiment above, which composes each config once."""
    for entry in cfg.claims:
        claim_spec(entry)
    for entry in cfg.known_failures:
        claim_spec(entry, known=True)
    if re.fullmatch(r"[a-z0-9_]+_mini", name):
        entries = [*cfg.claims, *cfg.known_failures]
        assert any(not isinstance(e, str) and e.get("headline") for e in entries), \
            f"{name}: a headline table without a headline claim"
    if cfg.table is None:
        return
    check_tuned_on(name, cfg)
    rows = set(cfg.table.rows) | set(cfg.table.get("sub_rows") or [])
    controls = controls_of(cfg)
    if controls and (cfg.table.get("sub_rows") or set(controls) <= set(cfg.table.rows)):
        check_controls(controls, rows, name)
    for entry, is_known in [(e, False) for e in cfg.claims] + [(e, True) for e in cfg.known_failures]:
        own = claim_spec(entry, known=is_known).controls
        if own and (cfg.table.get("sub_rows") or set(own) <= set(cfg.table.rows)):
            check_controls(own, rows, f"{name}, claim '{entry['claim']}'")
