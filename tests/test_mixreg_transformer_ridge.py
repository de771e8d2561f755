"""mixreg_transformer's prior and the rules that ignore the mixture: the component draw (the
sphere of radius √d or N(0, I_d)), the posterior mean as the conditional mean by Monte Carlo
(its residual is orthogonal to functions of what the predictor sees, and a posterior mean with
the wrong prior is not), ridge against a written-out solve and as the Bayes rule of a single
Gaussian prior (Monte Carlo), and the zero predictor."""
import numpy as np
import pytest
import torch

from methods.mixreg_transformer import (MixtureOfRegressions, argmin_predictions, draw_components, ols_predictions,
                                        posterior_mean_predictions, ridge_predictions, stages, zero_predictions)


def test_sphere_draw_has_norm_sqrt_d_and_isotropic_second_moment():
    gen = torch.Generator().manual_seed(0)
    w = draw_components(20000, 5, gen, "sphere")
    np.testing.assert_allclose(w.norm(dim=1).numpy(), np.sqrt(5), rtol=1e-12)
    second = (w.T @ w / len(w)).numpy()            # E w wᵀ = I_d on the sphere of radius √d
    assert np.abs(second - np.eye(5)).max() < 0.05
    g = draw_components(20000, 5, torch.Generator().manual_seed(0), "gaussian")
    assert g.norm(dim=1).std() > 0.3               # N(0, I_d): norms vary
    # the same Gaussian draw, rescaled: the sphere keeps each direction
    np.testing.assert_allclose((g / g.norm(dim=1, keepdim=True)).numpy(), (w / w.norm(dim=1, keepdim=True)).numpy(),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="component draw"):
        draw_components(3, 4, gen, "uniform")


def test_mixture_draws_on_the_sphere_by_default():
    mix = MixtureOfRegressions(8, 5, 0.5, seed=3, dtype=torch.float64)
    np.testing.assert_allclose(mix.components.norm(dim=1).numpy(), np.sqrt(8), rtol=1e-12)
    gauss = MixtureOfRegressions(8, 5, 0.5, seed=3, dtype=torch.float64, draw="gaussian")
    assert not np.allclose(gauss.components.norm(dim=1).numpy(), np.sqrt(8))


def _orthogonality_z(residual, features):
    """|mean(r g)| / its standard error for each feature g (B, k) at positions >= 1: a
    conditional mean's residual is uncorrelated with every function of what it conditions on."""
    out = []
    for g in features:
        prod = (residual * g)[:, 1:].mean(1)     # one number per prompt: prompts are independent
        out.append(abs(prod.mean().item()) / (prod.std().item() / len(prod) ** 0.5))
    return np.array(out)


def test_posterior_mean_is_the_conditional_mean_by_monte_carlo():
    """Bayes optimality written as orthogonality (an independent derivation: no softmax, only
    the defining property E[(y − E[y|data]) g(data)] = 0 over 40k sampled prompts): the posterior
    mean's residual is orthogonal to each component's prediction, to argmin's and to ridge's.
    A posterior mean with the wrong prior (the same directions with N(0, I_d) norms instead of √d)
    is not."""
    mix = MixtureOfRegressions(4, 3, 0.5, seed=1, dtype=torch.float64)
    xs, ys, _ = mix.sample(40000, 6, torch.Generator().manual_seed(2))
    features = [torch.einsum("bkd,d->bk", xs, w) for w in mix.components]
    features += [argmin_predictions(xs, ys, mix.components), ridge_predictions(xs, ys, 0.5)]
    right = _orthogonality_z(ys - posterior_mean_predictions(xs, ys, mix.components, 0.5), features)
    assert right.max() < 4.5, right
    wrong_norms = torch.tensor([0.5, 1.0, 1.6], dtype=torch.float64).unsqueeze(1)   # ‖w‖ / √d of a Gaussian draw
    wrong = _orthogonality_z(ys - posterior_mean_predictions(xs, ys, mix.components * wrong_norms, 0.5), features)
    assert wrong.max() > 10, wrong


def test_ridge_matches_the_penalised_solve_per_prefix():
    mix = MixtureOfRegressions(4, 3, 0.7, seed=0, dtype=torch.float64)
    xs, ys, _ = mix.sample(5, 9, torch.Generator().manual_seed(1))      # prefixes shorter and longer than d
    pred = ridge_predictions(xs, ys, 0.7, prior_var=2.0)
    lam = 0.7 ** 2 / 2.0
    x, y = xs.numpy(), ys.numpy()
    for b in range(5):
        assert pred[b, 0] == 0
        for i in range(1, 9):
            a = np.vstack([x[b, :i], np.sqrt(lam) * np.eye(4)])          # ridge as augmented least squares
            w = np.linalg.lstsq(a, np.concatenate([y[b, :i], np.zeros(4)]), rcond=None)[0]
            assert pred[b, i].item() == pytest.approx(float(x[b, i] @ w), rel=1e-9, abs=1e-12)


def test_ridge_at_sigma_zero_is_least_squares_and_bad_input_is_refused():
    mix = MixtureOfRegressions(4, 3, 0.0, seed=0, dtype=torch.float64)
    xs, ys, _ = mix.sample(4, 7, torch.Generator().manual_seed(1))
    torch.testing.assert_close(ridge_predictions(xs, ys, 0.0), ols_predictions(xs, ys))
    with pytest.raises(ValueError, match="prior_var"):
        ridge_predictions(xs, ys, 0.5, prior_var=0.0)
    with pytest.raises(ValueError, match="noise_std"):
        ridge_predictions(xs, ys, -0.5)


def test_ridge_is_the_bayes_rule_of_one_gaussian_prior_by_monte_carlo():
    """With w ~ N(0, I_d) drawn afresh for every prompt, ridge at λ = σ² is the conditional mean:
    its residual is orthogonal to OLS's and to each coordinate's x; with λ ten times too large,
    it is not."""
    gen = torch.Generator().manual_seed(4)
    b, k, d, sigma = 40000, 6, 3, 0.5
    w = torch.randn(b, d, generator=gen, dtype=torch.float64)
    xs = torch.randn(b, k, d, generator=gen, dtype=torch.float64)
    ys = torch.einsum("bkd,bd->bk", xs, w) + sigma * torch.randn(b, k, generator=gen, dtype=torch.float64)
    features = [ols_predictions(xs, ys), ridge_predictions(xs, ys, sigma, prior_var=0.1)]
    assert _orthogonality_z(ys - ridge_predictions(xs, ys, sigma), features).max() < 4.5
    assert _orthogonality_z(ys - ridge_predictions(xs, ys, sigma, prior_var=0.1), features).max() > 10


def test_zero_predicts_nothing_and_the_gap_metric_reads_lengths_from_d():
    mix = MixtureOfRegressions(4, 3, 0.5, seed=0, dtype=torch.float64)
    xs, ys, _ = mix.sample(50, 7, torch.Generator().manual_seed(1))
    assert (zero_predictions(xs, ys) == 0).all()
    preds = {"posterior_mean": posterior_mean_predictions(xs, ys, mix.components, 0.5), "zero": zero_predictions(xs, ys)}
    rows = stages.procedure_metrics(preds, ys, 4)
    curve = lambda p: ((p - ys) ** 2).mean(0).numpy() / 4
    assert set(k for k in rows["zero"] if k.startswith("nmse_k")) == {"nmse_k4", "nmse_k5", "nmse_k6"}
    assert rows["zero"]["nmse_k5"] == pytest.approx(curve(preds["zero"])[5], rel=1e-12)
    gap = (curve(preds["zero"]) - curve(preds["posterior_mean"]))[4:].max()
    assert rows["zero"]["gap_pm_max"] == pytest.approx(gap, rel=1e-12)
    assert rows["posterior_mean"]["gap_pm_max"] == 0
