"""SPS and DoG (methods/delta_sgd/baselines.py) against their updates written out in numpy: SPS as
the official src/sps.py ('constant' mode) computes it, DoG as Ivgi et al. (2023) Algorithm 1 with
r_eps = reps_rel (1 + ||x_0||) (the authors' package)."""
import math

import numpy as np
import pytest
import torch

from methods.delta_sgd.baselines import dog_local, sps_local, sps_step_size
from methods.delta_sgd.config import Row


def _problem(n=40, d=3, batches=6, bs=8, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, d))
    b = a @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n)
    w0, c0 = rng.standard_normal(d), 0.7
    idx = [rng.choice(n, bs, replace=False) for _ in range(batches)]
    return a, b, w0, c0, idx


class WeightBias(torch.nn.Module):
    """Two parameter tensors (a vector and a scalar): the norms must span both."""
    def __init__(self, w0, c0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
        self.c = torch.nn.Parameter(torch.tensor(c0, dtype=torch.float64))

    def forward(self, a):
        return a @ self.w + self.c


def _loss_fn(a, b):
    at, bt = torch.tensor(a), torch.tensor(b)
    return lambda model, i: 0.5 * ((model(at[i]) - bt[i]) ** 2).mean()


def _f_and_grad(a, b, x, i):
    """f(x; B) = mean_B (a w + c - b)^2 / 2, x = (w, c); its gradient as one vector."""
    r = a[i] @ x[:-1] + x[-1] - b[i]
    return 0.5 * np.mean(r ** 2), np.concatenate([a[i].T @ r / len(i), [r.mean()]])


def _numpy_sps(a, b, x0, idx, c=0.5, eps=1e-8, eta_max=None):
    x, steps = x0.copy(), []
    for i in idx:
        f, g = _f_and_grad(a, b, x, i)
        eta = f / (c * g @ g + eps)
        eta = eta if eta_max is None else min(eta, eta_max)
        x = x - eta * g
        steps.append(eta)
    return steps, x


def _numpy_dog(a, b, x0, idx, reps_rel=1e-6, eps=1e-8):
    x, rbar, G, steps = x0.copy(), reps_rel * (1 + np.linalg.norm(x0)), eps, []
    for i in idx:
        _, g = _f_and_grad(a, b, x, i)
        rbar = max(rbar, np.linalg.norm(x - x0))
        G = G + g @ g
        eta = rbar / np.sqrt(G)
        x = x - eta * g
        steps.append(eta)
    return steps, x


def _run(fn, a, b, w0, c0, idx, **kw):
    model = WeightBias(w0, c0)
    steps = fn(model, [torch.tensor(i) for i in idx], _loss_fn(a, b), **kw)
    return steps, np.concatenate([model.w.detach().numpy(), [float(model.c.detach())]])


@pytest.mark.parametrize("c,eta_max", [(0.5, None), (0.2, None), (0.5, 0.7)])
def test_sps_matches_numpy(c, eta_max):
    a, b, w0, c0, idx = _problem()
    ref_steps, ref_x = _numpy_sps(a, b, np.append(w0, c0), idx, c=c, eta_max=eta_max)
    steps, x = _run(sps_local, a, b, w0, c0, idx, c=c, eta_max=eta_max)
    np.testing.assert_allclose(steps, ref_steps, rtol=0, atol=1e-10)
    np.testing.assert_allclose(x, ref_x, rtol=0, atol=1e-10)
    if eta_max is not None:
        assert max(steps) == eta_max and min(steps) < eta_max   # the cap binds on some steps only


def test_sps_step_size_cases():
    assert sps_step_size(2.0, 4.0, c=0.5, eps=0.0) == pytest.approx(1.0)          # 2 / (0.5 * 4)
    assert sps_step_size(0.3, 4.0, fstar=0.5) == 0.0                               # f < f*: no step
    assert sps_step_size(1.0, 0.0, eps=1e-8) == pytest.approx(1e8)                # zero gradient: eps only
    assert sps_step_size(2.0, 4.0, eta_max=0.1) == 0.1
    assert math.isnan(sps_step_size(float("nan"), 1.0))                          # diverged: no crash


@pytest.mark.parametrize("reps_rel", [1e-6, 1e-2])
def test_dog_matches_numpy(reps_rel):
    a, b, w0, c0, idx = _problem(batches=10)
    ref_steps, ref_x = _numpy_dog(a, b, np.append(w0, c0), idx, reps_rel=reps_rel)
    steps, x = _run(dog_local, a, b, w0, c0, idx, reps_rel=reps_rel)
    np.testing.assert_allclose(steps, ref_steps, rtol=1e-12, atol=0)
    np.testing.assert_allclose(x, ref_x, rtol=0, atol=1e-10)
    # the first step is r_eps / sqrt(||g_0||^2 + eps) with x_0 = (w, c) as one vector
    _, g0 = _f_and_grad(a, b, np.append(w0, c0), idx[0])
    assert steps[0] == pytest.approx(reps_rel * (1 + math.hypot(np.linalg.norm(w0), c0)) / math.sqrt(g0 @ g0 + 1e-8))
    assert steps[-1] > steps[0]     # the distance term takes over from r_eps


@pytest.mark.parametrize("fn", [sps_local, dog_local])
def test_state_is_fresh_on_every_call(fn):
    a, b, w0, c0, idx = _problem()
    first, _ = _run(fn, a, b, w0, c0, idx)
    model = WeightBias(w0, c0)
    batches, loss = [torch.tensor(i) for i in idx], _loss_fn(a, b)
    fn(model, batches, loss)
    with torch.no_grad():                       # restart from the same point: the same steps again
        model.w.copy_(torch.tensor(w0)), model.c.fill_(c0)
    np.testing.assert_allclose(fn(model, batches, loss), first, rtol=1e-12, atol=0)


@pytest.mark.parametrize("call", [
    lambda: sps_step_size(1.0, 1.0, c=0.0), lambda: sps_step_size(1.0, 1.0, eps=-1e-8),
    lambda: sps_step_size(1.0, -1.0), lambda: sps_step_size(1.0, 1.0, eta_max=0.0),
    lambda: sps_step_size(1.0, 0.0, eps=0.0), lambda: sps_step_size(1.0, float("inf")),
    lambda: sps_local(WeightBias(np.zeros(2), 0.0), [], None, c=-1.0),
    lambda: dog_local(WeightBias(np.zeros(2), 0.0), [], None, reps_rel=0.0),
    lambda: dog_local(WeightBias(np.zeros(2), 0.0), [], None, eps=float("nan")),
    lambda: Row(kind="sps", c=0.0), lambda: Row(kind="dog", reps_rel=-1e-6)])
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_dog_zero_gradient_sum_raises():
    model = WeightBias(np.zeros(2), 0.0)
    with pytest.raises(ValueError, match="eps > 0"):
        dog_local(model, [torch.tensor([0])], lambda m, i: 0.0 * m.w.sum(), eps=0.0)
