"""Stacked Tempering (issue #53), training and measurement: the PCD gradient against autograd, mode
jumps and hysteresis labels against slow loops, the cost ratio, the Ising energy and Wolff sampler
against enumeration, `summarise`'s normalisations, one `train_rbm` update written out (sign, l2 on W
only), the upper layers of `init_stack` and `train_stack` against enumerated laws, and bad input. The
samplers' exact laws are in test_stacked_tempering.py."""
from __future__ import annotations

import itertools
import math

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


def _count_products(rbms):
    """Instrument every RBM: each call that multiplies by W adds N M per chain to counts[l]."""
    counts = [0.0] * len(rbms)
    for l, r in enumerate(rbms):
        for name in ("hidden_probs", "visible_probs", "free_energy_v", "free_energy_h", "energy"):
            def wrapped(*args, _f=getattr(r, name), _l=l, _r=r, **kw):
                counts[_l] += _r.num_visible * _r.num_hidden * args[0].shape[0]
                return _f(*args, **kw)
            setattr(r, name, wrapped)
    return counts


@pytest.mark.parametrize("step", [1, 2])
def test_stack_products_count_what_a_stacked_step_multiplies(step):
    """stack_products against the products one real step does (every W product counted by
    instrumenting the RBMs: swap free energies, redraws, the top RBM left out, the closing sweeps)."""
    from methods.stacked_tempering.sampler import stack_products

    rbms = [BinaryRBM(7, 5), BinaryRBM(5, 4), BinaryRBM(4, 3)]
    g = torch.Generator().manual_seed(0)
    vs, hs = init_stack(rbms, (torch.rand(6, 7, generator=g) < 0.5).float(), g)
    counts = _count_products(rbms)
    stacked_tempering_step(rbms, vs, hs, step, g)
    assert sum(counts) / 6 == stack_products(rbms, step)


def test_stack_cost_averages_both_parities_over_two_products_of_rbm_1():
    from methods.stacked_tempering.sampler import stack_products

    rbms = [BinaryRBM(784, 20), BinaryRBM(20, 20), BinaryRBM(20, 10)]
    p = [784 * 20, 20 * 20, 20 * 10]
    odd = 3 * (p[0] + p[1]) + p[2] + 2 * sum(p)       # pair (0, 1), top left out, sweeps
    even = 3 * (p[1] + p[2]) + 2 * sum(p)             # pair (1, 2), layer 0 untouched, sweeps
    assert stack_products(rbms, 1) == odd and stack_products(rbms, 2) == even
    assert stack_cost(rbms) == pytest.approx((odd + even) / 2 / (2 * p[0]))
    assert stack_cost(rbms) > (sum(p) / p[0])          # above the sweeps-only flop ratio (1.04 here)


def test_pt_cost_counts_sweeps_and_exchange_energies():
    from methods.stacked_tempering.sampler import linear_betas, parallel_tempering_step, pt_cost

    r = BinaryRBM(7, 5)
    g = torch.Generator().manual_seed(0)
    betas = linear_betas(4, 0.5)
    vs = [(torch.rand(6, 7, generator=g) < 0.5).float() for _ in betas]
    hs = [(torch.rand(6, 5, generator=g) < 0.5).float() for _ in betas]
    counts = _count_products([r])
    parallel_tempering_step(r, betas, vs, hs, 1, g)
    assert counts[0] / 6 / (2 * 7 * 5) == pt_cost(4) == 6.0
    with pytest.raises(ValueError, match="at least one replica"):
        pt_cost(0)


def test_exact_share_against_the_joint_enumeration():
    """RBM 1's start-mode share among core states, from the joint law over all (v, h) (not from F_h)."""
    from methods.stacked_tempering.measure import core_labels, exact_share

    r = rbm(5, 4, 3)
    labeller = lambda p: core_labels(2 * p.mean(-1) - 1, 0.05)
    vs = torch.tensor(list(itertools.product([0.0, 1.0], repeat=5)), dtype=r.weight.dtype)
    hs = torch.tensor(list(itertools.product([0.0, 1.0], repeat=4)), dtype=r.weight.dtype)
    weight = torch.exp(-r.energy(vs.repeat_interleave(16, 0), hs.repeat(32, 1))).reshape(32, 16).sum(0)  # p(h)
    labels = labeller(r.visible_probs(hs))
    assert (labels == 1).any() and (labels == 0).any() and (labels == -1).any()
    expected = float(weight[labels == 0].sum() / weight[labels >= 0].sum())
    assert exact_share(r, labeller, 0, chunk=5) == pytest.approx(expected, rel=1e-9)
    assert exact_share(r, labeller, 1) == pytest.approx(1 - expected, rel=1e-9)
    with pytest.raises(ValueError, match="no hidden state"):
        exact_share(r, lambda p: torch.full((len(p),), -1), 0)
    with pytest.raises(ValueError, match="at most 24"):
        exact_share(BinaryRBM(2, 25), labeller, 0)


def test_summarise_share_and_mix_err_over_the_second_half():
    from methods.stacked_tempering.measure import summarise

    # second half = sweeps 3..5; chain 0 core labels 1 -1 0 (share of start 1: 1/2); chain 1: -1 -1 -1,
    # held 0 (its share 0); chain 2 never labelled (share 1, the start mode's)
    cores = torch.tensor([[1, 0, -1], [0, 0, -1], [1, -1, -1], [1, -1, -1], [-1, -1, -1], [0, -1, -1]])
    out = summarise(cores, start_label=1, cost=1.0, exact=0.25)
    late = cores[3:]
    assert out["share"] == pytest.approx(1 / 2)         # pooled core sweeps of the second half: chain 0's 1, 0
    per_chain = [1 / 2, 0.0, 1.0]
    assert out["mix_err"] == pytest.approx(np.mean([abs(s - 0.25) for s in per_chain]))
    assert late.shape[0] == 3 and "mix_err" not in summarise(cores, 1, 1.0)


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


# ---------------------------------------------------------------- pieces the cold read found untested

def test_summarise_normalises_transits_per_chain_per_10k_sweeps_cost_and_balance():
    from methods.stacked_tempering.measure import summarise

    # held labels: chain 0 -> 1 1 0 0 1 (2 transits), chain 1 -> 0 0 1 1 1 (1 transit)
    cores = torch.tensor([[1, 0], [-1, 0], [0, 1], [0, -1], [1, 1]])
    out = summarise(cores, start_label=1, cost=2.0)
    assert out["jumps"] == pytest.approx(1.5 * 1e4 / 4)            # mean over chains, per 10^4 of T - 1 sweeps
    assert out["jumps_per_cost"] == pytest.approx(1.5 * 1e4 / 4 / 2.0)
    assert out["balance"] == pytest.approx(abs(6 / 10 - 0.5))      # 6 of 10 labelled sweeps in mode 1


@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_train_rbm_ascends_the_pcd_gradient_with_l2_on_w_only(l2):
    """One SGD(η) update from a fixed generator, written out: W += η (dW - l2 W), a += η da, b += η db
    with (dW, da, db) the likelihood's ascent direction on the same batch and the same persistent chains."""
    from methods.stacked_tempering.sampler import gibbs_step
    from methods.stacked_tempering.train import init_visible_bias, train_rbm

    data = (torch.rand(12, 5, generator=torch.Generator().manual_seed(1)) < 0.4).double()
    lr = 0.05
    r = rbm(5, 3, 2)
    ref = rbm(5, 3, 2)
    init_visible_bias(ref, data)
    g = torch.Generator().manual_seed(3)
    chains = data[torch.randint(len(data), (7,), generator=g)]
    order = torch.randperm(len(data), generator=g)
    chains, _ = gibbs_step(ref, chains, g)
    dw, da, db = pcd_gradient(ref, data[order], chains)
    w0, a0, b0 = ref.weight.detach().clone(), ref.visible_bias.detach().clone(), ref.hidden_bias.detach().clone()
    train_rbm(r, data, epochs=1, batch_size=len(data), optimizer=lambda p: torch.optim.SGD(p, lr=lr),
              pcd_steps=1, num_chains=7, l2=l2, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(r.weight.detach(), w0 + lr * (dw - l2 * w0))
    torch.testing.assert_close(r.visible_bias.detach(), a0 + lr * da)     # no decay on the biases
    torch.testing.assert_close(r.hidden_bias.detach(), b0 + lr * db)


def test_init_stack_upper_layers_follow_the_bottom_up_chain_of_conditionals():
    """Layer l's visible state: the law of v_l is sum over h_0..h_l of p_0(h_0|v0) p_1(h_1|h_0) ...
    p_l(h_l|h_{l-1}) p_l(v|h_l), enumerated on a 3-RBM stack, against 50,000 draws."""
    from tests.test_stacked_tempering import bernoulli, states, tiny_stack

    rbms = [r.float() for r in tiny_stack()]
    n = 50_000
    v0 = torch.tensor([[1.0, 0.0]]).expand(n, -1)
    with torch.no_grad():
        vs, _ = init_stack(rbms, v0, torch.Generator().manual_seed(4))
        law = {(1.0, 0.0): 1.0}                         # law of the layer's input, over its states
        for level, r in enumerate(rbms):
            hidden = {}
            for x, p in law.items():
                ph = r.hidden_probs(torch.tensor([x]))[0].double()
                for h in states(r.num_hidden):
                    key = tuple(h.tolist())
                    hidden[key] = hidden.get(key, 0.0) + p * bernoulli(ph, h)
            mean_v = sum(p * r.visible_probs(torch.tensor([h]))[0].double() for h, p in hidden.items())
            assert (vs[level].mean(0).double() - mean_v).abs().max() < 5 * math.sqrt(0.25 / n), level
            law = hidden


def test_train_stack_feeds_each_upper_rbm_hidden_samples_of_the_one_below():
    """With no epochs, an upper RBM's visible bias is the logit of its first input's mean: for RBM 2 the
    mean of h ~ p_1(h | data) is E p_1(h | v) over the data, for RBM 3 E_data sum_h1 p_1(h1|v) p_2(h|h1)."""
    from methods.stacked_tempering.train import train_stack
    from tests.test_stacked_tempering import states

    g = torch.Generator().manual_seed(0)
    data = (torch.rand(40_000, 4, generator=g) < torch.tensor([0.2, 0.5, 0.7, 0.9])).float()
    rbm1 = rbm(4, 3, 5).float()
    stack = train_stack(rbm1, data, [2, 2], epochs=0, batch_size=100,
                        optimizer=lambda p: torch.optim.SGD(p, lr=0.1), generator=g)
    assert [(r.num_visible, r.num_hidden) for r in stack] == [(4, 3), (3, 2), (2, 2)]
    with torch.no_grad():
        p1 = rbm1.hidden_probs(data).double().mean(0)
        torch.testing.assert_close(torch.sigmoid(stack[1].visible_bias.double()), p1, atol=0.01, rtol=0)
        ph1 = rbm1.hidden_probs(data).double()
        mean2 = torch.zeros(2, dtype=torch.float64)
        for h in states(3):
            p_h = torch.where(h == 1, ph1, 1 - ph1).prod(1).mean()
            mean2 += p_h * stack[1].hidden_probs(h[None].float())[0].double()
    torch.testing.assert_close(torch.sigmoid(stack[2].visible_bias.double()), mean2, atol=0.01, rtol=0)
