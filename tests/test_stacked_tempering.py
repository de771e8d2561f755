"""Stacked Tempering (issue #53): every equation against an independent derivation: exact enumeration
of tiny RBMs, the issue's formulas written as slow loops, detailed balance by brute force over all
states, the exact one-step law of the official order, chi-square invariance of the product law.
Training, measurement, the Ising sampler and bad input: test_stacked_tempering_measure.py."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from scipy import stats

from methods.stacked_tempering import (BinaryRBM, init_stack, linear_betas, parallel_tempering_step,
                                       pt_swap_log_acceptance, stacked_tempering_step, swap_log_acceptance)

torch.set_default_dtype(torch.float32)


def rbm(n, m, seed, scale=0.8):
    """A tiny RBM with O(1) random parameters (float64 for exact comparisons)."""
    g = torch.Generator().manual_seed(seed)
    r = BinaryRBM(n, m).double()
    with torch.no_grad():
        r.weight.copy_(torch.randn(n, m, generator=g, dtype=torch.float64) * scale)
        r.visible_bias.copy_(torch.randn(n, generator=g, dtype=torch.float64) * scale)
        r.hidden_bias.copy_(torch.randn(m, generator=g, dtype=torch.float64) * scale)
    return r


def states(n):
    return torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=torch.float64)


def energy_loop(r, v, h):
    """E = -sum_i a_i v_i - sum_mu b_mu h_mu - sum_{i,mu} v_i W_{i mu} h_mu, one term at a time."""
    a, b, w = r.visible_bias.tolist(), r.hidden_bias.tolist(), r.weight.tolist()
    e = -sum(a[i] * v[i] for i in range(len(a))) - sum(b[j] * h[j] for j in range(len(b)))
    return e - sum(v[i] * w[i][j] * h[j] for i in range(len(a)) for j in range(len(b)))


def log_marginal_v(r, v):
    """-F_v(v) = log sum_h exp(-E(v, h)), by enumeration."""
    return math.log(sum(math.exp(-energy_loop(r, v.tolist(), h.tolist())) for h in states(r.num_hidden)))


def log_marginal_h(r, h):
    return math.log(sum(math.exp(-energy_loop(r, v.tolist(), h.tolist())) for v in states(r.num_visible)))


# ---------------------------------------------------------------- the RBM against enumeration (5 x 4)

def test_energy_free_energies_and_conditionals_match_enumeration_of_a_5x4_rbm():
    r = rbm(5, 4, 0)
    vs, hs = states(5), states(4)
    with torch.no_grad():
        assert r.energy(vs[:, None].expand(-1, 16, -1).reshape(-1, 5), hs.repeat(32, 1)).tolist() == pytest.approx(
            [energy_loop(r, v.tolist(), h.tolist()) for v in vs for h in hs], abs=1e-12)
        assert r.free_energy_v(vs).tolist() == pytest.approx([-log_marginal_v(r, v) for v in vs], abs=1e-10)
        assert r.free_energy_h(hs).tolist() == pytest.approx([-log_marginal_h(r, h) for h in hs], abs=1e-10)
        for beta in (1.0, 0.6):
            v = vs[11]
            weights = torch.tensor([math.exp(-beta * energy_loop(r, v.tolist(), h.tolist())) for h in hs], dtype=torch.float64)
            exact = (weights[:, None] * hs).sum(0) / weights.sum()        # p(h_mu = 1 | v) at beta
            assert r.hidden_probs(v[None], beta)[0].tolist() == pytest.approx(exact.tolist(), abs=1e-10)
            h = hs[6]
            weights = torch.tensor([math.exp(-beta * energy_loop(r, u.tolist(), h.tolist())) for u in vs], dtype=torch.float64)
            exact = (weights[:, None] * vs).sum(0) / weights.sum()
            assert r.visible_probs(h[None], beta)[0].tolist() == pytest.approx(exact.tolist(), abs=1e-10)


def test_samplers_draw_the_conditionals():
    r = rbm(5, 4, 1).float()
    g = torch.Generator().manual_seed(0)
    v = torch.tensor([[1.0, 0, 1, 1, 0]]).expand(40000, -1)
    with torch.no_grad():
        freq = r.sample_h(v, g, beta=0.7).mean(0)
        p = r.hidden_probs(v[:1], 0.7)[0]
    # 5 sigma of a Bernoulli mean over 40,000 draws
    assert (freq - p).abs().max() < 5 * math.sqrt(0.25 / 40000)
    assert set(torch.unique(r.sample_v(r.sample_h(v[:100], g), g)).tolist()) <= {0.0, 1.0}


# ---------------------------------------------------------------- the swap

def test_swap_log_acceptance_is_the_ratio_of_the_summed_out_product_law():
    """exp(log acc) = pi(h', v') / pi(h, v), pi(h_l, v_{l+1}) = sum_{v_l} e^{-E_l} sum_{h_{l+1}} e^{-E_{l+1}}."""
    lower, upper = rbm(3, 2, 2), rbm(2, 3, 3)
    for h, v in itertools.product(states(2), states(2)):
        log_pi = log_marginal_h(lower, h) + log_marginal_v(upper, v)
        log_pi_swapped = log_marginal_h(lower, v) + log_marginal_v(upper, h)
        with torch.no_grad():
            got = swap_log_acceptance(lower, h[None], upper, v[None]).item()
        assert got == pytest.approx(log_pi_swapped - log_pi, abs=1e-10)


def swap_kernel(lower, upper, log_acc=swap_log_acceptance):
    """The code's swap move of one pair (then v_l, h_{l+1} redrawn) as an exact matrix over all states
    x = (v_l, h_l, v_{l+1}, h_{l+1}), and the product law pi(x) from the joint energies."""
    n, m, k = lower.num_visible, lower.num_hidden, upper.num_hidden
    xs = states(n + m + m + k)
    split = lambda x: (x[:n], x[n:n + m], x[n + m:n + 2 * m], x[n + 2 * m:])
    log_pi = torch.tensor([-energy_loop(lower, x[:n].tolist(), x[n:n + m].tolist())
                           - energy_loop(upper, x[n + m:n + 2 * m].tolist(), x[n + 2 * m:].tolist()) for x in xs],
                          dtype=torch.float64)
    pi = torch.softmax(log_pi, 0)
    kern = torch.zeros(len(xs), len(xs), dtype=torch.float64)
    index = {tuple(x.tolist()): i for i, x in enumerate(xs)}
    with torch.no_grad():
        for i, x in enumerate(xs):
            v1, h1, v2, h2 = split(x)
            acc = min(1.0, math.exp(log_acc(lower, h1[None], upper, v2[None]).item()))
            for p_move, (a, b) in ((acc, (v2, h1)), (1 - acc, (h1, v2))):
                pv = lower.visible_probs(a[None])[0]
                ph = upper.hidden_probs(b[None])[0]
                for nv, nh in itertools.product(states(n), states(k)):
                    q = torch.prod(torch.where(nv == 1, pv, 1 - pv)) * torch.prod(torch.where(nh == 1, ph, 1 - ph))
                    kern[i, index[tuple(torch.cat([nv, a, b, nh]).tolist())]] += p_move * q
    return pi, kern


def test_swap_move_satisfies_detailed_balance_over_all_states_of_a_tiny_stack():
    lower, upper = rbm(2, 2, 4, scale=1.2), rbm(2, 2, 5, scale=1.2)
    pi, kern = swap_kernel(lower, upper)
    flow = pi[:, None] * kern
    assert kern.sum(1).tolist() == pytest.approx([1.0] * len(pi), abs=1e-12)
    assert torch.allclose(flow, flow.T, atol=1e-14)
    assert torch.allclose(pi @ kern, pi, atol=1e-14)
    # the test can fail: the opposite sign (a wrong rule) breaks detailed balance
    _, wrong = swap_kernel(lower, upper, lambda *a: -swap_log_acceptance(*a))
    assert not torch.allclose(pi[:, None] * wrong, (pi[:, None] * wrong).T, atol=1e-6)


# ---------------------------------------------------------------- a stacked step: official order

SIZES = [(2, 2), (2, 1), (1, 2)]     # 3 RBMs; state bits: v0 2, h0 2, v1 2, h1 1, v2 1, h2 2 = 10


def tiny_stack(seed=6):
    return [rbm(n, m, seed + i, scale=1.3) for i, (n, m) in enumerate(SIZES)]


def bernoulli(p, x):
    return float(torch.prod(torch.where(x == 1, p, 1 - p)).detach())


def exact_step_law(rbms, vs, hs, step):
    """The official stacked_tempering.jl step written out as an exact law over all outcomes (a slow
    loop over dict states): swap pairs by parity (then v_l ~ p(v|h_l), h_{l+1} ~ p(h|v_{l+1})), a
    leftover top gets v ~ p(v|h); then h ~ p(h|v) and v ~ p(v|h) on every layer."""
    law = {(tuple(tuple(v.tolist()) for v in vs), tuple(tuple(h.tolist()) for h in hs)): 1.0}

    def redraw(law, fn):      # fn(vs, hs) -> list of ((vs, hs), prob)
        out = {}
        for (v_, h_), p in law.items():
            for key, q in fn([torch.tensor(x, dtype=torch.float64) for x in v_],
                             [torch.tensor(x, dtype=torch.float64) for x in h_]):
                if q > 0:
                    out[key] = out.get(key, 0.0) + p * q
        return out

    key = lambda v_, h_: (tuple(tuple(x.tolist()) for x in v_), tuple(tuple(x.tolist()) for x in h_))
    L = len(rbms)
    first = 0 if step % 2 == 1 else 1
    for l in range(first, L, 2):
        if l + 1 < L:
            def swap(v_, h_, l=l):
                lo, up = rbms[l], rbms[l + 1]
                d1 = -log_marginal_h(lo, v_[l + 1]) + log_marginal_h(lo, h_[l])
                d2 = -log_marginal_v(up, h_[l]) + log_marginal_v(up, v_[l + 1])
                acc = min(1.0, math.exp(-(d1 + d2)))
                out = []
                for p_move, (a, b) in ((acc, (v_[l + 1], h_[l])), (1 - acc, (h_[l], v_[l + 1]))):
                    for nv, nh in itertools.product(states(lo.num_visible), states(up.num_hidden)):
                        q = bernoulli(lo.visible_probs(a[None])[0], nv) * bernoulli(up.hidden_probs(b[None])[0], nh)
                        v2, h2 = list(v_), list(h_)
                        v2[l], h2[l], v2[l + 1], h2[l + 1] = nv, a, b, nh
                        out.append((key(v2, h2), p_move * q))
                return out
            law = redraw(law, swap)
        else:
            def top(v_, h_, l=l):
                return [(key(v_[:l] + [nv] + v_[l + 1:], h_), bernoulli(rbms[l].visible_probs(h_[l][None])[0], nv))
                        for nv in states(rbms[l].num_visible)]
            law = redraw(law, top)
    for l in range(L):
        law = redraw(law, lambda v_, h_, l=l: [(key(v_, h_[:l] + [nh] + h_[l + 1:]),
                                                bernoulli(rbms[l].hidden_probs(v_[l][None])[0], nh))
                                               for nh in states(rbms[l].num_hidden)])
    for l in range(L):
        law = redraw(law, lambda v_, h_, l=l: [(key(v_[:l] + [nv] + v_[l + 1:], h_),
                                                bernoulli(rbms[l].visible_probs(h_[l][None])[0], nv))
                                               for nv in states(rbms[l].num_visible)])
    return law


def encode(vs, hs):
    """States of all layers -> one integer per chain (bits of v0, h0, v1, h1, ...)."""
    bits = torch.cat([t for pair in zip(vs, hs) for t in pair], dim=1).long()
    return (bits * (2 ** torch.arange(bits.shape[1] - 1, -1, -1))).sum(1)


def chi2_pvalue(codes, probs: dict, n_states: int):
    counts = torch.bincount(codes, minlength=n_states).double()
    expected = torch.zeros(n_states, dtype=torch.float64)
    for k, p in probs.items():
        expected[k] = p
    expected *= len(codes) / expected.sum()
    assert counts[expected == 0].sum() == 0, "a state of zero probability was reached"
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    exp = exp[keep] * obs[keep].sum() / exp[keep].sum()
    return stats.chisquare(obs[keep].numpy(), exp.numpy()).pvalue


@pytest.mark.parametrize("step", [1, 2])
def test_one_stacked_step_from_a_fixed_state_has_the_official_orders_exact_law(step):
    rbms = [r.float() for r in tiny_stack()]
    exact_rbms = tiny_stack()
    vs0 = [torch.tensor([1.0, 0]), torch.tensor([0.0, 1]), torch.tensor([1.0])]
    hs0 = [torch.tensor([1.0, 1]), torch.tensor([0.0]), torch.tensor([0.0, 1])]
    law = exact_step_law(exact_rbms, [v.double() for v in vs0], [h.double() for h in hs0], step)
    probs = {}
    for (v_, h_), p in law.items():
        code = int(encode([torch.tensor([x]) for x in v_], [torch.tensor([x]) for x in h_])[0])
        probs[code] = probs.get(code, 0.0) + p
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-12)
    n = 100_000
    g = torch.Generator().manual_seed(step)
    with torch.no_grad():
        vs, hs = stacked_tempering_step(rbms, [v.expand(n, -1) for v in vs0], [h.expand(n, -1) for h in hs0], step, g)
    assert chi2_pvalue(encode(vs, hs), probs, 2 ** 10) > 1e-4


def product_law(rbms):
    """pi over all states (codes) of the stack: prod_l exp(-E_l(v_l, h_l)) / Z_l, by enumeration."""
    per_layer = []
    for r in rbms:
        vs, hs = states(r.num_visible), states(r.num_hidden)
        e = torch.tensor([[energy_loop(r, v.tolist(), h.tolist()) for h in hs] for v in vs])
        per_layer.append((vs, hs, torch.softmax(-e.flatten(), 0).reshape(e.shape)))
    return per_layer


def sample_product_law(per_layer, n, g):
    vs, hs = [], []
    for sv, sh, p in per_layer:
        idx = torch.multinomial(p.flatten().float(), n, replacement=True, generator=g)
        vs.append(sv[idx // p.shape[1]].float())
        hs.append(sh[idx % p.shape[1]].float())
    return vs, hs


@pytest.mark.parametrize("step", [1, 2])
def test_stacked_step_leaves_the_product_law_invariant(step):
    rbms = [r.float() for r in tiny_stack(9)]
    per_layer = product_law(tiny_stack(9))
    g = torch.Generator().manual_seed(10 + step)
    n = 200_000
    vs, hs = sample_product_law(per_layer, n, g)
    with torch.no_grad():
        vs, hs = stacked_tempering_step(rbms, vs, hs, step, g)
    probs = {}
    for combo in itertools.product(*[itertools.product(range(len(sv)), range(len(sh))) for sv, sh, _ in per_layer]):
        p = 1.0
        v_, h_ = [], []
        for (i, j), (sv, sh, pl) in zip(combo, per_layer):
            p *= float(pl[i, j])
            v_.append(sv[i][None])
            h_.append(sh[j][None])
        probs[int(encode(v_, h_)[0])] = p
    assert chi2_pvalue(encode(vs, hs), probs, 2 ** 10) > 1e-4


def test_init_stack_draws_bottom_up_then_resamples():
    rbms = [r.float() for r in tiny_stack()]
    g = torch.Generator().manual_seed(0)
    v0 = torch.tensor([[1.0, 0.0]]).expand(50_000, -1)
    with torch.no_grad():
        vs, hs = init_stack(rbms, v0, g)
        # h_0 ~ p_0(h | v0) then v_0 ~ p_0(v | h_0): the law of v_0 is sum_h p(h | v0) p(v | h)
        ph = rbms[0].hidden_probs(v0[:1])[0].double()
        exact = torch.zeros(2, dtype=torch.float64)
        for h in states(2):
            exact += bernoulli(ph, h) * rbms[0].visible_probs(h[None].float())[0].double()
    assert (vs[0].mean(0).double() - exact).abs().max() < 5 * math.sqrt(0.25 / 50_000)
    assert [v.shape[1] for v in vs] == [2, 2, 1] and [h.shape[1] for h in hs] == [2, 1, 2]


# ---------------------------------------------------------------- parallel tempering

def test_pt_swap_log_acceptance_is_the_ratio_of_the_tempered_laws():
    e_i, e_j = torch.tensor([1.3, -0.4]), torch.tensor([-0.2, 2.0])
    bi, bj = 1.0, 0.7
    ratio = (-bi * e_j - bj * e_i) - (-bi * e_i - bj * e_j)
    assert pt_swap_log_acceptance(bi, bj, e_i, e_j).tolist() == pytest.approx(ratio.tolist())


@pytest.mark.parametrize("step", [1, 2])
def test_pt_step_leaves_the_tempered_product_law_invariant(step):
    r64 = rbm(2, 2, 20, scale=1.5)
    r = r64.float()
    betas = [1.0, 0.8, 0.5]
    sv, sh = states(2), states(2)
    e = torch.tensor([[energy_loop(r64, v.tolist(), h.tolist()) for h in sh] for v in sv])
    laws = [torch.softmax(-b * e.flatten(), 0) for b in betas]
    g = torch.Generator().manual_seed(30 + step)
    n = 200_000
    vs, hs = [], []
    for p in laws:
        idx = torch.multinomial(p.float(), n, replacement=True, generator=g)
        vs.append(sv[idx // 4].float())
        hs.append(sh[idx % 4].float())
    with torch.no_grad():
        vs, hs = parallel_tempering_step(r, betas, vs, hs, step, g)
    probs = {}
    flat = [laws[k].tolist() for k in range(3)]
    for combo in itertools.product(range(16), repeat=3):    # replica k's (v, h) is 4 bits: code c
        code = (combo[0] << 8) | (combo[1] << 4) | combo[2]
        probs[code] = math.prod(flat[k][c] for k, c in enumerate(combo))
    assert chi2_pvalue(encode(vs, hs), probs, 2 ** 12) > 1e-4


def test_linear_betas_and_ladder_checks():
    assert linear_betas(6, 0.6) == pytest.approx([1.0, 0.92, 0.84, 0.76, 0.68, 0.6])
    r = BinaryRBM(2, 2)
    v, h = [torch.zeros(1, 2)] * 2, [torch.zeros(1, 2)] * 2
    for bad in ([0.9, 0.5], [1.0, 1.0], [1.0, 1.2]):
        with pytest.raises(ValueError, match="beta ladder"):
            parallel_tempering_step(r, bad, v, h, 1)


# ---------------------------------------------------------------- training
