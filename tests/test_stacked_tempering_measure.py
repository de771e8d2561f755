"""Stacked Tempering (issue #53), training and measurement: the PCD gradient against autograd, mode
jumps and hysteresis labels against slow loops, the cost ratio, the Ising energy and Wolff sampler
against enumeration, and bad input. The samplers' exact laws are in test_stacked_tempering.py."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from methods.stacked_tempering import (BinaryRBM, count_mode_jumps, init_stack, ising_energy, pcd_gradient,
                                       stack_cost, stacked_tempering_step, wolff_ising)
from tests.test_stacked_tempering import rbm

torch.set_default_dtype(torch.float32)


def test_pcd_gradient_is_minus_the_autograd_gradient_of_the_free_energy_difference():
    r = rbm(5, 4, 7)
    g = torch.Generator().manual_seed(0)
    data = (torch.rand(13, 5, generator=g) < 0.5).double()
    model = (torch.rand(9, 5, generator=g) < 0.5).double()
    dw, da, db = pcd_gradient(r, data, model)
    r.zero_grad()
    (r.free_energy_v(data).mean() - r.free_energy_v(model).mean()).backward()
    assert torch.allclose(dw, -r.weight.grad, atol=1e-12)
    assert torch.allclose(da, -r.visible_bias.grad, atol=1e-12)
    assert torch.allclose(db, -r.hidden_bias.grad, atol=1e-12)


# ---------------------------------------------------------------- jumps, costs, Ising

def test_count_mode_jumps_against_a_loop():
    labels = torch.tensor([[0, 0, 1], [1, 0, 1], [1, 0, 0], [0, 1, 0]])
    loop = [sum(int(labels[t, c] != labels[t - 1, c]) for t in range(1, 4)) for c in range(3)]
    assert count_mode_jumps(labels).tolist() == loop == [2, 1, 1]
    with pytest.raises(ValueError):
        count_mode_jumps(torch.zeros(3))


def test_stack_cost_is_the_flop_ratio():
    rbms = [BinaryRBM(784, 200), BinaryRBM(200, 100), BinaryRBM(100, 50)]
    assert stack_cost(rbms) == pytest.approx((784 * 200 + 200 * 100 + 100 * 50) / (784 * 200))


def test_ising_energy_against_loops():
    g = torch.Generator().manual_seed(0)
    s = torch.where(torch.rand(3, 4, 4, generator=g) < 0.5, -1, 1).to(torch.int8)
    for k in range(3):
        x = s[k].tolist()
        e = -sum(x[i][j] * (x[i][(j + 1) % 4] + x[(i + 1) % 4][j]) for i in range(4) for j in range(4))
        assert ising_energy(s[k]).item() == e
    assert ising_energy(torch.ones(8, 8)).item() == -128


def test_wolff_samples_the_3x3_ising_law():
    beta = 0.4
    spins = wolff_ising(3, beta, 10_000, seed=0, burn_in=100, thin=2)
    assert spins.dtype == torch.int8 and set(torch.unique(spins).tolist()) <= {-1, 1}
    all_states = torch.tensor(list(itertools.product([-1, 1], repeat=9))).reshape(-1, 3, 3)
    e_all = ising_energy(all_states)
    levels = sorted(set(e_all.tolist()))
    p = torch.softmax(-beta * e_all, 0)
    exact = np.array([float(p[e_all == lv].sum()) for lv in levels])
    e = ising_energy(spins)
    counts = np.array([int((e == lv).sum()) for lv in levels])
    # the energy histogram of (weakly correlated, thinned) samples against the exact law
    tv = 0.5 * np.abs(counts / counts.sum() - exact).sum()
    assert tv < 0.04
    mag = spins.reshape(len(spins), -1).float().sum(1)
    assert abs(float((mag > 0).float().mean()) - 0.5) < 0.04        # both signs


# ---------------------------------------------------------------- bad input

def test_bad_input_raises_value_errors():
    with pytest.raises(ValueError, match="at least one"):
        BinaryRBM(0, 3)
    with pytest.raises(ValueError, match="hidden units but RBM 1"):
        init_stack([BinaryRBM(4, 3), BinaryRBM(2, 2)], torch.zeros(1, 4))
    with pytest.raises(ValueError, match="binary"):
        init_stack([BinaryRBM(4, 3)], torch.full((1, 4), 0.5))
    rbms = [BinaryRBM(2, 2), BinaryRBM(2, 1)]
    with pytest.raises(ValueError, match="binary"):
        stacked_tempering_step(rbms, [torch.zeros(1, 2), torch.full((1, 2), 2.0)], [torch.zeros(1, 2), torch.zeros(1, 1)], 1)
    with pytest.raises(ValueError, match="step counts from 1"):
        stacked_tempering_step(rbms, [torch.zeros(1, 2)] * 2, [torch.zeros(1, 2), torch.zeros(1, 1)], 0)


def _slow_transits(scores, core):
    """Hysteresis written as a loop: per chain, the label is set only inside a core, held otherwise;
    a transit is a change of a set label."""
    counts = []
    for c in range(len(scores[0])):
        label, n = None, 0
        for t in range(len(scores)):
            s = scores[t][c]
            new = 1 if s >= core else 0 if s <= -core else label
            if label is not None and new != label:
                n += 1
            label = new
        counts.append(n)
    return counts


def test_hysteresis_labels_count_core_to_core_transits_not_boundary_flicker():
    from methods.stacked_tempering import count_transits
    from methods.stacked_tempering.measure import magnetisation_labeller, summarise

    g = torch.Generator().manual_seed(0)
    T = 200
    flicker = -0.8 * (torch.arange(T) < 5) + 0.1 * (-1.0) ** torch.arange(T) * (torch.arange(T) >= 5)
    # crosses core to core: -0.8 -> +0.7 -> -0.6 -> +0.9, with boundary noise between the cores
    path = torch.tensor([-0.8] * 20 + [0.1, -0.1, 0.3] * 10 + [0.7] * 20 + [-0.2, 0.2] * 15 + [-0.6] * 20
                        + [0.45, -0.45] * 10 + [0.9] * (T - 20 - 30 - 20 - 30 - 20 - 20))
    unlabelled_start = torch.cat([0.2 * torch.ones(50), 0.8 * torch.ones(50), -0.3 * torch.ones(T - 100)])
    noisy = (torch.rand(T, generator=g) * 2 - 1) * 0.49        # never reaches a core of 0.5
    m = torch.stack([flicker, path, unlabelled_start, noisy], 1)          # (T, 4) magnetisations
    p = ((m[:, :, None] + 1) / 2).expand(T, 4, 16)                         # p(v | h) with that mean spin
    cores = torch.stack([magnetisation_labeller(0.5)(p[t]) for t in range(T)])
    got = count_transits(cores).tolist()
    assert got == _slow_transits(m.tolist(), 0.5) == [0, 3, 0, 0]
    assert count_mode_jumps((m > 0).long()).tolist()[0] > 100              # the old sign label flickers
    out = summarise(cores[:, :1], start_label=0, cost=2.0)
    assert out["jumps"] == 0.0 and out["balance"] == 0.5
    out = summarise(cores[:, 1:2], start_label=0, cost=2.0)
    assert out["jumps"] == pytest.approx(3 * 1e4 / (T - 1)) and out["jumps_per_cost"] == out["jumps"] / 2
    with pytest.raises(ValueError, match="ising_core"):
        magnetisation_labeller(1.0)


def test_logistic_labeller_cores_are_classifier_probabilities():
    from methods.stacked_tempering.measure import logistic_labeller

    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.rand(50, 6, generator=g) * 0.3, 0.7 + torch.rand(50, 6, generator=g) * 0.3]).numpy()
    y = np.r_[np.zeros(50), np.ones(50)].astype(int)
    lab = logistic_labeller(x, y, core=0.9)
    from sklearn.linear_model import LogisticRegression

    prob = LogisticRegression(max_iter=1000, random_state=0).fit(x, y).predict_proba(x)[:, 1]
    states = torch.as_tensor(np.r_[x, np.full((1, 6), 0.5)], dtype=torch.float32)
    want = np.where(np.r_[prob, np.nan] >= 0.9, 1, np.where(np.r_[prob, np.nan] <= 0.1, 0, -1))
    got = lab(states).numpy()
    assert (got[:-1] == want[:-1]).mean() > 0.99 and got[-1] == -1   # float32 vs sklearn's float64
    with pytest.raises(ValueError, match="prob_core"):
        logistic_labeller(x, y, core=0.4)
