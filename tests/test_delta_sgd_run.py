"""Δ-SGD's run pieces: the SGD decay schedule, the per-client resampling, the Satellite labels,
a diverged row scored at chance, the row and task pickers' config errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from common.config import UserError
from methods.delta_sgd.data import resample_parts
from methods.delta_sgd.train import make_evaluate, make_local_update, pick, sgd_step_size


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


def _toy_task(n=24, d=3, classes=2, clients=3):
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(n, d, generator=g), "y": torch.randint(0, classes, (n,), generator=g),
            "parts": list(torch.arange(n).chunk(clients)), "num_classes": classes}


def test_randlr_draw_per_client_and_round():
    # one log-uniform step per (client, round), constant within the pass, different across clients
    # and rounds, the same when the (client, round) pass is repeated, and the step SGD really takes
    task, seed = _toy_task(), 5
    fed = OmegaConf.create({"local_batch_size": 8, "local_epochs": 1, "rounds": 4})
    spec = {"kind": "randlr", "low": 0.01, "high": 1.0}
    draws = {}
    for r in range(3):
        for k in range(3):
            trace: list = []
            torch.manual_seed(0)
            net = torch.nn.Linear(3, 2)
            w0 = [p.detach().clone() for p in net.parameters()]
            make_local_update(spec, task, fed, seed, trace)(k, r, {"model": net})
            assert len(trace) == 1 and trace[0][0] == r            # one pass, tagged with its round
            (step,) = trace[0][1]                                  # 8 rows, batch 8: one step
            assert 0.01 <= step <= 1.0
            draws[(k, r)] = step
            # the weights moved by exactly that step times the gradient on the client's batch
            ref = torch.nn.Linear(3, 2)
            with torch.no_grad():
                for p, q in zip(ref.parameters(), w0):
                    p.copy_(q)
            part = task["parts"][k]
            torch.nn.functional.cross_entropy(ref(task["x"][part]), task["y"][part]).backward()
            for p, q in zip(net.parameters(), ref.parameters()):
                assert float((p.detach() - (q.detach() - step * q.grad)).abs().max()) < 1e-6
    assert len(set(draws.values())) == len(draws)
    again: list = []
    fed2 = OmegaConf.create({"local_batch_size": 2, "local_epochs": 2, "rounds": 4})
    make_local_update(spec, task, fed2, seed, again)(1, 2, {"model": torch.nn.Linear(3, 2)})
    steps = again[0][1]
    assert len(steps) == 8 and set(steps) == {draws[(1, 2)]}   # constant over the pass's 8 steps


@pytest.mark.parametrize("kind", ["dsgd", "growth", "randlr", "sgd"])
def test_nonfinite_start_model_does_not_train(kind):
    spec = {"dsgd": {"kind": "dsgd", "lr": 0.2, "amplifier": 0.1, "damping": 1.0, "eps": 1e-8, "weight_decay": 0.0},
            "growth": {"kind": "growth", "lr": 0.2, "amplifier": 0.1},
            "randlr": {"kind": "randlr", "low": 0.01, "high": 1.0},
            "sgd": {"kind": "sgd", "lr": 0.1}}[kind]
    fed = OmegaConf.create({"local_batch_size": 4, "local_epochs": 1, "rounds": 2})
    net = torch.nn.Linear(3, 2)
    with torch.no_grad():
        net.weight[1, 2] = float("inf")
    before = [p.detach().clone() for p in net.parameters()]
    trace: list = []
    out = make_local_update(spec, _toy_task(), fed, 0, trace)(0, 0, {"model": net})
    assert out == {} and trace == []
    for p, q in zip(net.parameters(), before):
        assert torch.equal(p.detach(), q)
    with torch.no_grad():                                    # the same client with a finite model trains
        net.weight[1, 2] = 0.0
    assert make_local_update(spec, _toy_task(), fed, 0, trace)(0, 0, {"model": net}) and trace
