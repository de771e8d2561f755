"""mixreg_transformer's procedures: the posterior mean against Bayes' rule written out, argmin,
OLS against numpy, an EM step against a loop, the sampler's statistics (the transformer:
test_mixreg_transformer_model.py; the run: test_mixreg_transformer_run.py)."""
import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from scipy.special import softmax
from scipy.stats import norm

from methods.mixreg_transformer import (MixtureOfRegressions, argmin_predictions, batch_em, normalized_sq_error,
                                        ols_predictions, posterior_mean_predictions, posterior_weights)

D, M, SIGMA = 4, 3, 0.5


def prompts(batch=6, length=7, dim=D, m=M, sigma=SIGMA, seed=0, dtype=torch.float64, draw="sphere"):
    mix = MixtureOfRegressions(dim, m, sigma, seed=seed, dtype=dtype, draw=draw)
    xs, ys, comp = mix.sample(batch, length, torch.Generator().manual_seed(seed + 1))
    return mix, xs, ys, comp


def bayes_rule(xs, ys, comps, sigma):
    """(weights (B, k, m), predictions (B, k)) by explicit Gaussian likelihoods, prompt by prompt
    and prefix by prefix: p_j ∝ (1/m) Π_{t<i} N(y_t; ⟨w_j, x_t⟩, σ²)."""
    xs, ys, comps = xs.numpy(), ys.numpy(), comps.numpy()
    b, k, _ = xs.shape
    weights, preds = np.zeros((b, k, len(comps))), np.zeros((b, k))
    for p in range(b):
        for i in range(k):
            joint = np.array([np.prod([norm.pdf(ys[p, t], loc=w @ xs[p, t], scale=sigma) for t in range(i)]) / len(comps)
                              for w in comps])
            weights[p, i] = joint / joint.sum()
            preds[p, i] = sum(weights[p, i, j] * (comps[j] @ xs[p, i]) for j in range(len(comps)))
    return weights, preds


# --- the posterior mean (displays 4-6) ------------------------------------------------------

def test_posterior_mean_matches_bayes_rule_prompt_by_prompt():
    mix, xs, ys, _ = prompts(sigma=1.0)
    weights, preds = bayes_rule(xs, ys, mix.components, 1.0)
    np.testing.assert_allclose(posterior_weights(xs, ys, mix.components, 1.0).numpy(), weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(posterior_mean_predictions(xs, ys, mix.components, 1.0).numpy(), preds, rtol=1e-9, atol=1e-12)


def test_weights_sum_to_one_are_uniform_at_position_zero_and_follow_a_permutation():
    mix, xs, ys, _ = prompts()
    w = posterior_weights(xs, ys, mix.components, SIGMA)
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2], dtype=w.dtype))
    torch.testing.assert_close(w[:, 0], torch.full((len(xs), M), 1 / M, dtype=w.dtype))
    perm = [2, 0, 1]
    torch.testing.assert_close(posterior_weights(xs, ys, mix.components[perm], SIGMA), w[..., perm])
    assert w[:, -1].max() > 0.9  # not trivially uniform: 6 examples pick a component


def test_weights_ignore_the_order_inside_the_prefix():
    mix, xs, ys, _ = prompts()
    order = torch.tensor([3, 0, 4, 1, 2, 5, 6])   # shuffles examples 0..4; position 5 sees the same set
    w = posterior_weights(xs, ys, mix.components, SIGMA)
    w_shuffled = posterior_weights(xs[:, order], ys[:, order], mix.components, SIGMA)
    torch.testing.assert_close(w_shuffled[:, 5:], w[:, 5:])
    assert not torch.allclose(w_shuffled[:, 1:5], w[:, 1:5])


@pytest.mark.parametrize("procedure", ["posterior_mean", "argmin", "ols"])
def test_changing_y_t_moves_only_later_predictions(procedure):
    mix, xs, ys, _ = prompts()
    predict = {"posterior_mean": lambda x, y: posterior_mean_predictions(x, y, mix.components, SIGMA),
               "argmin": lambda x, y: argmin_predictions(x, y, mix.components),
               "ols": ols_predictions}[procedure]
    t = 3
    moved = ys.clone()
    moved[:, t] += 5.0
    before, after = predict(xs, ys), predict(xs, moved)
    torch.testing.assert_close(after[:, :t + 1], before[:, :t + 1], rtol=0, atol=0)
    # every later position moves for some prompt (a saturated posterior or the argmin may not move)
    assert (after[:, t + 1:] - before[:, t + 1:]).abs().amax(0).gt(1e-6).all()


def test_sigma_to_zero_is_argmin_and_finite_when_every_likelihood_underflows():
    mix, xs, ys, _ = prompts(batch=20)
    tiny = 1e-30
    sq = (ys.unsqueeze(-1) - xs @ mix.components.T).square()[:, :1].sum(1)   # one example
    assert np.all(np.exp(-sq.numpy() / (2 * tiny ** 2)) == 0.0)            # Bayes' rule written out: 0/0
    for dtype in (torch.float32, torch.float64):
        x, y, c = xs.to(dtype), ys.to(dtype), mix.components.to(dtype)
        pm = posterior_mean_predictions(x, y, c, tiny)
        assert torch.isfinite(pm).all() and pm.dtype == dtype
        torch.testing.assert_close(pm, argmin_predictions(x, y, c))
    # position 0: every component ties, so both give the prior mean
    torch.testing.assert_close(argmin_predictions(xs, ys, mix.components)[:, 0], xs[:, 0] @ mix.components.mean(0))


def hard_weights_by_a_loop(xs, ys, comps):
    """σ = 0 weights (B, k, m) prompt by prompt and prefix by prefix: the components whose prefix
    residual sum of squares is least share the weight equally, the others get 0."""
    x, y, w = xs.double().numpy(), ys.double().numpy(), comps.double().numpy()
    out = np.zeros((x.shape[0], x.shape[1], len(w)))
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            sse = np.array([((y[b, :i] - x[b, :i] @ wj) ** 2).sum() for wj in w])
            least = sse == sse.min()
            out[b, i, least] = 1 / least.sum()
    return out


def test_sigma_zero_weights_split_equally_over_the_least_residual_components_by_a_loop():
    """σ = 0 against a loop, with ties beyond position 0: component 3 repeats component 0, so
    whenever either is least both get 1/2."""
    mix, xs, ys, _ = prompts(batch=20)
    comps = torch.cat([mix.components, mix.components[:1]])                 # (4, d), rows 0 and 3 equal
    expect = hard_weights_by_a_loop(xs, ys, comps)
    assert (expect[:, 1:] == 0.5).any() and (expect[:, 1:] == 1.0).any()   # both cases occur
    for dtype in (torch.float32, torch.float64):
        x, y, c = xs.to(dtype), ys.to(dtype), comps.to(dtype)
        np.testing.assert_allclose(posterior_weights(x, y, c, 0.0).double().numpy(), expect, rtol=0, atol=0)
        by_loop = (expect * (xs.numpy() @ comps.numpy().T)).sum(-1)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        np.testing.assert_allclose(posterior_mean_predictions(x, y, c, 0.0).double().numpy(), by_loop,
                                   rtol=tol, atol=tol)


def test_argmin_is_exact_on_noiseless_prompts():
    mix, xs, ys, comp = prompts(batch=50, sigma=0.0)
    torch.testing.assert_close(argmin_predictions(xs, ys, mix.components)[:, 1:], ys[:, 1:])
    w = posterior_weights(xs, ys, mix.components, 0.0)[:, 1:]
    assert torch.equal(w.argmax(-1), comp.unsqueeze(1).expand(-1, w.shape[1]))


def test_argmin_picks_the_least_residual_component_by_a_loop():
    mix, xs, ys, _ = prompts(batch=10)
    pred = argmin_predictions(xs, ys, mix.components)
    for b in range(10):
        for i in range(1, xs.shape[1]):
            sse = [float(((ys[b, :i] - xs[b, :i] @ w) ** 2).sum()) for w in mix.components]
            assert pred[b, i].item() == pytest.approx(float(xs[b, i] @ mix.components[int(np.argmin(sse))]), rel=1e-12)


def test_posterior_mean_risk_is_below_argmin_beyond_noise():
    """Bayes-optimality on 4000 prompts: the paired difference of per-prompt errors is positive
    by more than 4 standard errors."""
    mix, xs, ys, _ = prompts(batch=4000, length=10, sigma=1.0, seed=3)
    err = lambda p: (p - ys)[:, 1:].square().mean(1)
    diff = err(argmin_predictions(xs, ys, mix.components)) - err(posterior_mean_predictions(xs, ys, mix.components, 1.0))
    assert diff.mean() > 4 * diff.std() / len(diff) ** 0.5


# --- least squares and EM -------------------------------------------------------------------

def test_ols_matches_numpy_lstsq_per_prefix():
    _, xs, ys, _ = prompts(batch=5, length=9)   # prefixes shorter than, equal to and longer than d = 4
    pred = ols_predictions(xs, ys)
    x, y = xs.numpy(), ys.numpy()
    for b in range(5):
        assert pred[b, 0] == 0
        for i in range(1, 9):
            w = np.linalg.lstsq(x[b, :i], y[b, :i], rcond=None)[0]    # minimum norm (SVD)
            assert pred[b, i].item() == pytest.approx(float(x[b, i] @ w), rel=1e-8, abs=1e-10)


def test_one_em_step_matches_a_loop():
    # Gaussian components: with this seed every component keeps some weight (the loop below has
    # no rule for a component without weight; the next test covers that rule)
    mix, xs, ys, _ = prompts(batch=12, length=5, draw="gaussian")
    init = torch.randn(M, D, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    new = batch_em(xs, ys, M, SIGMA, iters=1, init=init)
    x, y, w0 = xs.numpy(), ys.numpy(), init.numpy()
    gamma = np.array([softmax([-((y[b] - x[b] @ w) ** 2).sum() / (2 * SIGMA ** 2) for w in w0]) for b in range(12)])
    for j in range(M):
        lhs = sum(gamma[b, j] * x[b].T @ x[b] for b in range(12))
        rhs = sum(gamma[b, j] * x[b].T @ y[b] for b in range(12))
        np.testing.assert_allclose(new[j].numpy(), np.linalg.solve(lhs, rhs), rtol=1e-9)


def em_step_by_a_loop(x, y, w0, gamma):
    """The M-step prompt by prompt from weights gamma (B, m); a component with no weight keeps w0."""
    new = w0.copy()
    for j in range(len(w0)):
        if gamma[:, j].sum() > 0:
            lhs = sum(gamma[b, j] * x[b].T @ x[b] for b in range(len(x)))
            rhs = sum(gamma[b, j] * x[b].T @ y[b] for b in range(len(x)))
            new[j] = np.linalg.solve(lhs, rhs)
    return new


def test_one_hard_em_step_at_sigma_zero_matches_a_loop():
    """σ = 0, the hard E-step: each prompt's weight goes to its least-residual estimates, split
    equally over ties. Estimates ±v tie exactly on the prompts with y = 0; the far estimate 50 u
    is no prompt's least, so it keeps its value (a pseudo-inverse of 0 would make it 0)."""
    gen = torch.Generator().manual_seed(7)
    v = torch.randn(D, generator=gen, dtype=torch.float64)
    init = torch.stack([v, -v, 50 * torch.randn(D, generator=gen, dtype=torch.float64)])
    xs = torch.randn(12, 6, D, generator=gen, dtype=torch.float64)
    truth = torch.cat([torch.zeros(3, D), (v + 0.3).expand(4, D), (0.3 - v).expand(5, D)]).double()
    ys = torch.einsum("bkd,bd->bk", xs, truth) + 0.1 * torch.randn(12, 6, generator=gen, dtype=torch.float64)
    ys[:3] = 0.0                                                    # y = 0: the ties
    x, y, w0 = xs.numpy(), ys.numpy(), init.numpy()
    sse = np.array([[((y[b] - x[b] @ w) ** 2).sum() for w in w0] for b in range(12)])
    least = sse == sse.min(1, keepdims=True)
    gamma = least / least.sum(1, keepdims=True)
    assert (gamma[:3, :2] == 0.5).all() and gamma[:, 0].sum() > 3 and gamma[:, 1].sum() > 3 and gamma[:, 2].sum() == 0
    new = batch_em(xs, ys, 3, 0.0, iters=1, init=init)
    np.testing.assert_allclose(new.numpy(), em_step_by_a_loop(x, y, w0, gamma), rtol=1e-9, atol=1e-12)
    assert torch.equal(new[2], init[2])
    # giving the tied prompts all to the first estimate (an argmax) would move both ±v estimates
    argmax = np.eye(3)[sse.argmin(1)]
    assert np.abs(em_step_by_a_loop(x, y, w0, argmax)[:2] - new[:2].numpy()).max() > 1e-3


def test_a_component_without_weight_keeps_its_estimate_at_positive_sigma():
    """σ = 0.5: the estimate 100 u is so far from every prompt that its weight underflows to 0; it
    stays put through 3 EM steps while the others move as the loop says."""
    _, xs, ys, _ = prompts(batch=30, length=6)
    gen = torch.Generator().manual_seed(8)
    init = torch.cat([torch.randn(2, D, generator=gen, dtype=torch.float64),
                      100 * torch.randn(1, D, generator=gen, dtype=torch.float64)])
    x, y, w = xs.numpy(), ys.numpy(), init.numpy()
    for _ in range(3):
        gamma = np.array([softmax([-((y[b] - x[b] @ wj) ** 2).sum() / (2 * SIGMA ** 2) for wj in w]) for b in range(30)])
        assert gamma[:, 2].sum() == 0
        w = em_step_by_a_loop(x, y, w, gamma)
    new = batch_em(xs, ys, 3, SIGMA, iters=3, init=init)
    np.testing.assert_allclose(new.numpy(), w, rtol=1e-9, atol=1e-12)
    assert torch.equal(new[2], init[2])


def test_em_recovers_the_components():
    mix, xs, ys, _ = prompts(batch=3000, length=10, seed=5)
    est = batch_em(xs, ys, M, SIGMA, iters=30, seed=0)
    dist = torch.cdist(est, mix.components).numpy()
    rows, cols = linear_sum_assignment(dist)
    # each estimate averages ~1000 prompts x 10 examples: its error is about σ/√10⁴ = 0.005 per coordinate
    assert dist[rows, cols].max() < 0.05
    assert est.dtype == ys.dtype and batch_em(xs.float(), ys.float(), M, SIGMA, iters=2).dtype == torch.float32


# --- the generative process -------------------------------------------------------------------

def test_sampler_residual_std_is_sigma_and_components_uniform():
    mix = MixtureOfRegressions(D, M, SIGMA, seed=1, dtype=torch.float64)
    batch, length = 4000, 8
    xs, ys, comp = mix.sample(batch, length, torch.Generator().manual_seed(0))
    resid = (ys - torch.einsum("bkd,bd->bk", xs, mix.components[comp])).flatten()
    n = len(resid)
    # var(s²) = 2σ⁴/(n − 1) for Gaussian residuals; 4 standard deviations
    assert abs(resid.var().item() - SIGMA ** 2) < 4 * SIGMA ** 2 * (2 / (n - 1)) ** 0.5
    assert abs(resid.mean().item()) < 4 * SIGMA / n ** 0.5
    counts = torch.bincount(comp, minlength=M).double()
    assert (counts - batch / M).abs().max() < 4 * (batch * (1 / M) * (1 - 1 / M)) ** 0.5
    assert abs(xs.var().item() - 1) < 4 * (2 / xs.numel()) ** 0.5


def test_zero_predictor_nmse_is_mean_norm_plus_noise_over_d():
    mix = MixtureOfRegressions(D, M, SIGMA, seed=2, dtype=torch.float64)
    xs, ys, _ = mix.sample(5000, 6, torch.Generator().manual_seed(1))
    expected = (mix.components.square().sum(1).mean().item() + SIGMA ** 2) / D
    per_prompt = ys.square().mean(1) / D                 # positions share a component: average them first
    got = normalized_sq_error(torch.zeros_like(ys), ys, D).mean().item()
    assert abs(got - expected) < 4 * per_prompt.std().item() / len(per_prompt) ** 0.5


def test_noise_std_must_be_nonnegative_and_components_must_match_the_width():
    mix, xs, ys, _ = prompts()
    with pytest.raises(ValueError, match="noise_std"):
        MixtureOfRegressions(D, M, -0.1)
    with pytest.raises(ValueError, match="noise_std"):
        posterior_weights(xs, ys, mix.components, -1.0)
    with pytest.raises(ValueError, match="noise_std"):
        batch_em(xs, ys, M, -1.0)
    with pytest.raises(ValueError, match=r"\(m, 4\)"):
        posterior_mean_predictions(xs, ys, torch.zeros(M, D + 1, dtype=xs.dtype), SIGMA)
    with pytest.raises(ValueError, match=r"\(m, 4\)"):
        argmin_predictions(xs, ys, torch.zeros(M, D - 1, dtype=xs.dtype))
    with pytest.raises(ValueError, match="shape"):
        ols_predictions(xs, ys[:, :-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_procedures_keep_the_input_dtype(dtype):
    mix, xs, ys, _ = prompts(dtype=dtype)
    assert mix.components.dtype == xs.dtype == ys.dtype == dtype
    for out in (posterior_weights(xs, ys, mix.components, SIGMA), posterior_mean_predictions(xs, ys, mix.components, SIGMA),
                argmin_predictions(xs, ys, mix.components), ols_predictions(xs, ys)):
        assert out.dtype == dtype
