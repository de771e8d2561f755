"""Δ-SGD's run pieces: the SGD decay schedule, the per-client resampling, the Satellite labels,
a diverged row scored at chance, the row and task pickers' config errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from common.config import UserError
from methods.delta_sgd.data import resample_parts
from methods.delta_sgd.train import make_evaluate, pick, sgd_step_size


def test_sgd_decay_follows_official_epochs():
    # official main.py: lr /= 10 when epoch - 1 == int(0.5 E) and when epoch - 1 == int(0.75 E)
    rounds, lr, want = 10, 0.1, []
    for epoch in range(rounds):
        if epoch - 1 == int(0.5 * rounds):
            lr /= 10
        if epoch - 1 == int(0.75 * rounds):
            lr /= 10
        want.append(lr)
    got = [sgd_step_size({"lr": 0.1, "decay": True}, r, rounds) for r in range(rounds)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert [sgd_step_size({"lr": 0.1}, r, rounds) for r in range(rounds)] == [0.1] * rounds


def test_resample_parts():
    parts = [torch.tensor([3, 5, 9]), torch.zeros(0, dtype=torch.long), torch.tensor([1])]
    out = resample_parts(parts, 7, seed=0)
    assert [len(p) for p in out] == [7, 0, 7]
    assert set(out[0].tolist()) <= {3, 5, 9} and set(out[2].tolist()) == {1}
    assert torch.equal(out[0], resample_parts(parts, 7, seed=0)[0])
    with pytest.raises(ValueError):
        resample_parts(parts, 0, seed=0)


def test_satellite_has_six_classes():
    pytest.importorskip("rdata")
    from methods.delta_sgd.data import satellite_table
    try:
        x, y = satellite_table("data", False)
    except Exception as err:   # the Debian package is not on this machine
        pytest.skip(str(err))
    assert x.shape == (6435, 36) and sorted(np.unique(y).tolist()) == list(range(6))
    assert np.bincount(y).tolist() == [1533, 703, 1358, 626, 707, 1508]   # mlbench's level order


def test_diverged_model_scored_at_chance():
    task = {"x_eval": torch.randn(5, 3), "y_eval": torch.zeros(5, dtype=torch.long), "num_classes": 4}
    net = torch.nn.Linear(3, 4)
    with torch.no_grad():
        net.weight[0, 0] = float("nan")
    assert make_evaluate(task)({"model": net}, 0) == {"acc": 25.0, "diverged": 1.0}
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor([1.0, 0, 0, 0]))
    assert make_evaluate(task)({"model": net}, 0) == {"acc": 100.0, "diverged": 0.0}


def test_pick_names_unknown_entries():
    cat = OmegaConf.create({"a": {"kind": "sgd"}, "b": {"kind": "adam"}})
    assert list(pick(cat, ["b", "a"], "rows")) == ["b", "a"]
    with pytest.raises(UserError, match="run_rows"):
        pick(cat, ["c"], "rows")
