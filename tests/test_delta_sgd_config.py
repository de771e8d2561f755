"""Δ-SGD's typed rows and tasks, the regret over the non-control rows, the float32 norms as the
official code takes them, and the figures."""
from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from common.config import UserError
from common.target_types import check_block
from methods.delta_sgd.config import Row, Task, as_spec
from methods.delta_sgd.rule import _diff_norm, regret
from methods.delta_sgd.train import pick


def test_regret_over_reference_rows_only():
    acc = {"a": {"t1": 80.0, "t2": 50.0}, "b": {"t1": 60.0, "t2": 70.0}, "ctl": {"t1": 90.0, "t2": 65.0}}
    got = regret(acc, reference=["a", "b"])
    # best of the reference: t1 80 (a), t2 70 (b); the control does not set it and goes negative
    assert got["a"] == {"regret_t1": 0.0, "regret_t2": 20.0, "max_regret": 20.0, "mean_regret": 10.0}
    assert got["b"] == {"regret_t1": 20.0, "regret_t2": 0.0, "max_regret": 20.0, "mean_regret": 10.0}
    assert got["ctl"] == {"regret_t1": -10.0, "regret_t2": 5.0, "max_regret": 5.0, "mean_regret": -2.5}
    # all rows as reference: the control sets t1's best
    assert regret(acc)["a"]["regret_t1"] == 10.0
    for bad in ([], ["zzz"]):
        with pytest.raises(ValueError, match="reference"):
            regret(acc, reference=bad)


def test_diff_norm_is_the_official_float32_expression():
    g = torch.Generator().manual_seed(0)
    a = [torch.randn(50, 30, generator=g), torch.randn(30, generator=g)]
    b = [torch.randn(50, 30, generator=g), torch.randn(30, generator=g)]
    # official Adsgd.compute_dif_norms: sum of (p - q).norm().item() ** 2 (float32 norms), then sqrt
    official = math.sqrt(sum((p - q).norm().item() ** 2 for p, q in zip(a, b)))
    assert _diff_norm(a, b) == pytest.approx(official, rel=1e-12)
    exact = math.sqrt(sum(float(((p.double() - q.double()) ** 2).sum()) for p, q in zip(a, b)))
    assert _diff_norm(a, b) == pytest.approx(exact, rel=1e-5)   # float32 rounding only
    a64, b64 = [t.double() for t in a], [t.double() for t in b]
    assert _diff_norm(a64, b64) == pytest.approx(exact, rel=1e-13)   # a float64 model: float64 norms
    assert _diff_norm([], []) == 0.0


def test_row_and_task_ranges():
    assert as_spec(Row, {"_target_": "x", "kind": "sgd", "lr": 0.1}, "r")["lr"] == 0.1
    assert as_spec(Row, {"kind": "growth", "control": True}, "r")["control"] is True
    for bad in ({"kind": "sgd", "lr": 0.0}, {"kind": "sgd", "lr": float("nan")}, {"kind": "sgd", "momentum": 1.0},
                {"kind": "dsgd", "damping": 0.0}, {"kind": "dsgd", "eps": -1.0}, {"kind": "dsgd", "amplifier": -0.1},
                {"kind": "randlr", "low": 0.5, "high": 0.1}, {"kind": "sgd", "nope": 1}):
        with pytest.raises(ValueError):
            as_spec(Row, bad, "r")
    ok = {"source": "digits", "alpha": 0.1, "pool": 100, "eval_size": 10, "model": "m"}
    assert as_spec(Task, ok, "t")["per_client"] is None
    for key, value in (("alpha", 0.0), ("pool", 0), ("per_client", 0)):
        with pytest.raises(ValueError):
            as_spec(Task, {**ok, key: value}, "t")


def test_types_checked_from_the_signature():
    check_block({"_target_": "methods.delta_sgd.config.Row", "kind": "dsgd", "lr": 0.2}, "method.rows.x.")
    with pytest.raises(UserError, match="kind"):
        check_block({"_target_": "methods.delta_sgd.config.Row", "kind": "sgdd"}, "method.rows.x.")
    with pytest.raises(UserError, match="lr"):
        check_block({"_target_": "methods.delta_sgd.config.Row", "kind": "sgd", "lr": "fast"}, "method.rows.x.")
    with pytest.raises(UserError, match="source"):
        check_block({"_target_": "methods.delta_sgd.config.Task", "source": "svhn", "alpha": 1.0, "pool": 10,
                     "eval_size": 5, "model": "m"}, "method.tasks.x.")


def test_pick_checks_each_entry():
    cat = OmegaConf.create({"a": {"kind": "sgd", "lr": 0.1}, "b": {"kind": "sgd", "lr": -1.0}})
    assert pick(cat, ["a"], "rows")["a"]["control"] is False
    with pytest.raises(UserError, match="method.rows.b"):
        pick(cat, ["b"], "rows")


def test_figures_written(tmp_path):
    from methods.delta_sgd.plots import curves_plot, steps_plot

    curves = {"t": {"dsgd": [(0, 10.0), (1, 20.0)], "sgd": [(0, 15.0), (1, 18.0)]}}
    traces = {"t": {"dsgd": [(0, [0.2, 0.1]), (1, [0.05])], "sgd": [(0, [0.1])]}}
    rows = {"dsgd": {"kind": "dsgd"}, "sgd": {"kind": "sgd"}}
    for path in (curves_plot(curves, tmp_path / "c.png"), steps_plot(traces, rows, tmp_path / "s.png")):
        assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
