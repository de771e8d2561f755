"""Δ-SGD (methods/delta_sgd): the step-size rule case by case, the local loop against an
independent numpy loop on least squares, the growth control's closed form, the regret table,
bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from methods.delta_sgd import delta_lr, delta_sgd_local, growth_local, regret
from methods.delta_sgd.rule import log_uniform


def test_first_step_grows_from_eta0():
    # x_{-1} = x_0: the parameter difference is 0, so the step is the growth term alone
    lr, theta = delta_lr(0.2, 1.0, 0.0, 3.0, amplifier=0.1)
    assert lr == pytest.approx(0.2 * math.sqrt(1.1), abs=1e-15)
    assert theta == pytest.approx(math.sqrt(1.1), abs=1e-15)


def test_bound_binds():
    # ||dx|| / (damping ||dg||) = 0.5 / (2 * 5) = 0.05 < 0.3 sqrt(1 + 0.1 * 1.2)
    lr, theta = delta_lr(0.3, 1.2, 0.5, 5.0, amplifier=0.1, damping=2.0, eps=1e-8)
    assert lr == pytest.approx(0.05 + 1e-8, abs=1e-15)
    assert theta == pytest.approx((0.05 + 1e-8) / 0.3, abs=1e-15)


def test_growth_binds_and_eps_added():
    lr, theta = delta_lr(0.3, 1.2, 10.0, 0.1, amplifier=0.1, damping=1.0, eps=1e-3)
    grow = 0.3 * math.sqrt(1.12)
    assert lr == pytest.approx(grow + 1e-3, abs=1e-15)
    assert theta == pytest.approx(lr / 0.3, abs=1e-15)


def test_zero_gradient_change_grows_without_eps():
    lr, _ = delta_lr(0.3, 1.2, 1.0, 0.0, amplifier=0.1, eps=1e-3)
    assert lr == pytest.approx(0.3 * math.sqrt(1.12), abs=1e-15)


def test_tensor_differences_are_one_vector():
    dx = [torch.tensor([3.0]), torch.tensor([[4.0]])]             # norm 5
    dg = torch.tensor([0.0, 100.0])                                # norm 100
    assert delta_lr(1.0, 1.0, dx, dg, damping=1.0, eps=0.0)[0] == pytest.approx(0.05)


@pytest.mark.parametrize("bad", [dict(lr_prev=0.0), dict(lr_prev=-1.0), dict(theta_prev=0.0),
                                 dict(amplifier=-0.1), dict(damping=0.0), dict(eps=-1e-9)])
def test_bad_input(bad):
    args = dict(lr_prev=0.2, theta_prev=1.0, param_diff=1.0, grad_diff=1.0, amplifier=0.1, damping=1.0, eps=1e-8)
    args.update(bad)
    with pytest.raises(ValueError):
        delta_lr(**args)


def _least_squares(seed=0, n=40, d=5, batches=6, bs=8):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((n, d)), rng.standard_normal(n)
    w0 = rng.standard_normal(d)
    idx = [rng.choice(n, bs, replace=False) for _ in range(batches)]
    return a, b, w0, idx


def _numpy_delta_sgd(a, b, w0, idx, lr=0.2, amp=0.1, damping=1.0, eps=1e-8, wd=0.0):
    """The issue's equations written out: f(x; B) = mean_B (a x - b)^2 / 2."""
    grad = lambda x, i: a[i].T @ (a[i] @ x - b[i]) / len(i)   # noqa: E731
    x_prev, x, eta, theta = w0.copy(), w0.copy(), lr, 1.0
    steps, xs = [], []
    for i in idx:
        g, g_prev = grad(x, i), grad(x_prev, i)
        dx, dg = np.linalg.norm(x - x_prev), np.linalg.norm(g - g_prev)
        grow = eta * np.sqrt(1 + amp * theta)
        new = min(grow, dx / (damping * dg)) + eps if dx > 0 and dg > 0 else grow
        theta, eta = new / eta, new
        x_prev, x = x, x - eta * (g + wd * x)
        steps.append(eta)
        xs.append(x.copy())
    return steps, x


class Linear(torch.nn.Module):
    def __init__(self, w0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))

    def forward(self, a):
        return a @ self.w


def _loss(a, b):
    at, bt = torch.tensor(a), torch.tensor(b)
    return lambda model, i: 0.5 * ((model(at[i]) - bt[i]) ** 2).mean()


@pytest.mark.parametrize("damping,wd,lr", [(1.0, 0.0, 0.2), (2.0, 0.01, 0.05), (0.5, 0.0, 1.0)])
def test_local_loop_matches_numpy(damping, wd, lr):
    a, b, w0, idx = _least_squares()
    ref_steps, ref_x = _numpy_delta_sgd(a, b, w0, idx, lr=lr, damping=damping, wd=wd)
    model = Linear(w0)
    steps = delta_sgd_local(model, [torch.tensor(i) for i in idx], _loss(a, b), lr=lr, amplifier=0.1,
                            damping=damping, eps=1e-8, weight_decay=wd)
    np.testing.assert_allclose(steps, ref_steps, rtol=0, atol=1e-10)
    np.testing.assert_allclose(model.w.detach().numpy(), ref_x, rtol=0, atol=1e-10)
    binds = _bound_binds(a, b, w0, idx, lr, damping, wd)
    assert (sum(binds) > 0) == (lr >= 1.0), binds   # lr = 1 sees the bound, the others growth only


def _bound_binds(a, b, w0, idx, lr, damping, wd):
    steps, _ = _numpy_delta_sgd(a, b, w0, idx, lr=lr, damping=damping, wd=wd)
    prev = [lr] + steps[:-1]
    theta = [1.0] + [steps[k] / prev[k] for k in range(len(steps) - 1)]
    return [s < 0.999 * p * np.sqrt(1 + 0.1 * t) for s, p, t in zip(steps, prev, theta)]


class Affine(torch.nn.Module):
    """Two outputs, a weight matrix AND a bias vector: two parameter tensors of different shapes."""
    def __init__(self, x0):
        super().__init__()
        self.lin = torch.nn.Linear(x0.shape[0] - 1, x0.shape[1]).double()
        with torch.no_grad():
            self.lin.weight.copy_(torch.tensor(x0[:-1].T))
            self.lin.bias.copy_(torch.tensor(x0[-1]))

    def forward(self, a):
        return self.lin(a)


def _numpy_steps_one_vector(a1, b, x0, idx, lr, rows=None):
    """Δ-SGD on f(X; B) = mean_B ||a1 X - b||^2 / 2 with X = [W^T; c] (the bias as a last row of
    ones in a1): ‖Δx‖, ‖Δg‖ over all of X, or over X[rows] only (a per-tensor variant)."""
    sel = slice(None) if rows is None else rows
    grad = lambda x, i: a1[i].T @ (a1[i] @ x - b[i]) / len(i)   # noqa: E731
    x_prev, x, eta, theta, steps = x0.copy(), x0.copy(), lr, 1.0, []
    for i in idx:
        g, g_prev = grad(x, i), grad(x_prev, i)
        dx, dg = np.linalg.norm((x - x_prev)[sel]), np.linalg.norm((g - g_prev)[sel])
        grow = eta * np.sqrt(1 + 0.1 * theta)
        new = min(grow, dx / dg) + 1e-8 if dx > 0 and dg > 0 else grow
        theta, eta = new / eta, new
        x_prev, x = x, x - eta * g
        steps.append(eta)
    return steps, x


def test_norms_span_weight_and_bias():
    # ‖x_k − x_{k−1}‖ and ‖g_k − g'_k‖ over ALL parameters as one vector (weight and bias together),
    # as the official compute_dif_norms sums squared norms over every tensor
    rng = np.random.default_rng(3)
    n, d, k = 40, 4, 2
    a = rng.standard_normal((n, d))
    a1 = np.hstack([a, np.ones((n, 1))])
    b = rng.standard_normal((n, k)) + 3.0                  # a large offset: the bias gradient matters
    x0 = rng.standard_normal((d + 1, k))
    idx = [rng.choice(n, 8, replace=False) for _ in range(8)]
    ref_steps, ref_x = _numpy_steps_one_vector(a1, b, x0, idx, lr=1.0)
    weight_only, _ = _numpy_steps_one_vector(a1, b, x0, idx, lr=1.0, rows=slice(0, d))
    assert max(abs(u - v) for u, v in zip(ref_steps, weight_only)) > 1e-3   # the test can tell them apart
    model = Affine(x0)
    at, bt = torch.tensor(a), torch.tensor(b)
    steps = delta_sgd_local(model, [torch.tensor(i) for i in idx],
                            lambda m, i: 0.5 * ((m(at[i]) - bt[i]) ** 2).sum(1).mean(), lr=1.0,
                            amplifier=0.1, damping=1.0, eps=1e-8)
    np.testing.assert_allclose(steps, ref_steps, rtol=0, atol=1e-10)
    np.testing.assert_allclose(model.lin.weight.detach().numpy(), ref_x[:-1].T, rtol=0, atol=1e-10)
    np.testing.assert_allclose(model.lin.bias.detach().numpy(), ref_x[-1], rtol=0, atol=1e-10)


def test_local_state_is_fresh_on_every_call():
    a, b, w0, idx = _least_squares(seed=1)
    model = Linear(w0)
    batches = [torch.tensor(i) for i in idx]
    delta_sgd_local(model, batches, _loss(a, b))
    w1 = model.w.detach().numpy().copy()
    second = delta_sgd_local(model, batches, _loss(a, b))
    ref_steps, _ = _numpy_delta_sgd(a, b, w1, idx)
    np.testing.assert_allclose(second, ref_steps, atol=1e-10)
    assert second[0] == pytest.approx(0.2 * math.sqrt(1.1), abs=1e-12)


def test_growth_closed_form():
    a, b, w0, idx = _least_squares(seed=2)
    model = Linear(w0)
    steps = growth_local(model, [torch.tensor(i) for i in idx], _loss(a, b), lr=0.2, amplifier=0.1)
    eta, theta, ref = 0.2, 1.0, []
    for _ in idx:
        theta = math.sqrt(1 + 0.1 * theta)      # theta_k = sqrt(1 + delta theta_{k-1})
        eta = eta * theta
        ref.append(eta)
    np.testing.assert_allclose(steps, ref, rtol=0, atol=1e-14)
    # plain SGD steps with those sizes
    grad = lambda x, i: a[i].T @ (a[i] @ x - b[i]) / len(i)   # noqa: E731
    x = w0.copy()
    for s, i in zip(ref, idx):
        x = x - s * grad(x, i)
    np.testing.assert_allclose(model.w.detach().numpy(), x, atol=1e-10)


def test_regret_exact():
    acc = {"a": {"t1": 90.0, "t2": 50.0}, "b": {"t1": 80.0, "t2": 70.0}, "c": {"t1": 85.0, "t2": 69.0}}
    r = regret(acc)
    assert r["a"] == {"regret_t1": 0.0, "regret_t2": 20.0, "max_regret": 20.0, "mean_regret": 10.0}
    assert r["b"] == {"regret_t1": 10.0, "regret_t2": 0.0, "max_regret": 10.0, "mean_regret": 5.0}
    assert r["c"]["max_regret"] == 5.0 and r["c"]["mean_regret"] == 3.0


def test_regret_bad_input():
    with pytest.raises(ValueError, match="same tasks"):
        regret({"a": {"t1": 1.0}, "b": {"t2": 1.0}})
    with pytest.raises(ValueError):
        regret({})
    with pytest.raises(ValueError, match="not finite"):
        regret({"a": {"t1": float("nan")}})


def test_local_bad_input():
    model = Linear(np.zeros(2))
    with pytest.raises(ValueError):
        delta_sgd_local(model, [], lambda m, b: 0, lr=0.0)
    with pytest.raises(ValueError):
        delta_sgd_local(model, [], lambda m, b: 0, weight_decay=-1.0)
    with pytest.raises(ValueError):
        growth_local(model, [], lambda m, b: 0, amplifier=-1.0)


def test_log_uniform_range():
    rng = np.random.default_rng(0)
    draws = np.log10([log_uniform(rng, 0.01, 1.0) for _ in range(2000)])
    assert draws.min() >= -2 and draws.max() <= 0
    assert abs(draws.mean() + 1) < 0.05          # uniform in log10 over [-2, 0]: mean -1, sd 0.58 / sqrt(2000)
