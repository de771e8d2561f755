"""methods/unsup_pretrain: the factor model, PPCA, the two learners, the mixture task (issue 51).
Each formula against an independent derivation written here."""
import numpy as np
import pytest
from scipy import optimize, stats

from methods.unsup_pretrain import (RIDGE_ALPHAS, FactorModel, GaussianMixtureTask, composite_predictor, fit_ppca,
                                    ols, oracle_predictor, posterior_mean_features, ppca_from_scatter, prefix_ppca,
                                    pretrain_predictor, ridge_loo, shuffle_columns)


@pytest.fixture
def model():
    return FactorModel(dim=12, rank=3, spike=2.0, noise_std=0.8, label_noise=0.5, seed=4)


@pytest.mark.parametrize("informative", [True, False])
def test_loadings_beta_gamma_are_as_specified(informative):
    m = FactorModel(20, 4, 3.0, informative=informative, seed=1)
    assert m.loadings.shape == (20, 4)
    np.testing.assert_allclose(m.loadings.T @ m.loadings, 3.0 * np.eye(4), atol=1e-12)      # BᵀB = s I
    np.testing.assert_allclose(m.loadings.T @ m.gamma, 0.0, atol=1e-12)                   # γ ⊥ col(B)
    assert np.linalg.norm(m.gamma) == pytest.approx(1.0) and np.linalg.norm(m.beta) == pytest.approx(1.0)
    np.testing.assert_allclose(m.covariance(), m.loadings @ m.loadings.T + np.eye(20), atol=1e-12)


def test_an_instance_is_a_function_of_its_seed():
    a, b, c = FactorModel(10, 2, 1.0, seed=3), FactorModel(10, 2, 1.0, seed=3), FactorModel(10, 2, 1.0, seed=4)
    np.testing.assert_array_equal(a.loadings, b.loadings)
    assert not np.allclose(a.loadings, c.loadings)
    xa, ya = a.sample(5, np.random.default_rng(0))
    xb, yb = b.sample(5, np.random.default_rng(0))
    np.testing.assert_array_equal(xa, xb)
    np.testing.assert_array_equal(ya, yb)


@pytest.mark.parametrize("informative", [True, False])
def test_regression_weights_are_the_population_least_squares_solution(informative):
    """a* = Cov(x)⁻¹Cov(x, y) written out from the model (informative: Cov(x, y) = Bβ; uninformative: σγ),
    and a Monte Carlo regression of y on x agrees within its standard error."""
    m = FactorModel(8, 2, 2.0, noise_std=0.7, label_noise=0.3, informative=informative, seed=2)
    cross = m.loadings @ m.beta if informative else m.noise_std * m.gamma
    np.testing.assert_allclose(m.regression_weights(), np.linalg.solve(m.covariance(), cross), atol=1e-12)
    x, y = m.sample(400_000, np.random.default_rng(0))
    w = np.linalg.lstsq(x, y, rcond=None)[0]
    residual_var = np.var(y - x @ m.regression_weights())
    se = np.sqrt(residual_var * np.diag(np.linalg.inv(x.T @ x)))
    assert np.all(np.abs(w - m.regression_weights()) < 5 * se)


def test_excess_risk_matches_monte_carlo(model):
    rng = np.random.default_rng(7)
    w, c = model.regression_weights() + 0.2 * rng.standard_normal(model.dim), 0.3
    x, y = model.sample(400_000, rng)
    diff = (y - x @ w - c) ** 2 - (y - x @ model.regression_weights()) ** 2
    assert abs(diff.mean() - model.excess_risk(w, c)) < 5 * diff.std() / np.sqrt(len(diff))
    assert model.excess_risk(model.regression_weights(), 0.0) == pytest.approx(0.0, abs=1e-15)


def test_ppca_matches_the_eigen_formulas_from_an_svd(model):
    x, _ = model.sample(500, np.random.default_rng(0))
    loadings, noise_var, mean = fit_ppca(x, 3)
    np.testing.assert_allclose(mean, x.mean(axis=0))
    _, s, vt = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)       # S's eigen-pairs from the data's SVD
    lam = s ** 2 / len(x)
    assert noise_var == pytest.approx(lam[3:].mean(), rel=1e-12)
    expected = vt[:3].T * np.sqrt(lam[:3] - lam[3:].mean())
    np.testing.assert_allclose(np.abs(loadings), np.abs(expected), atol=1e-10)   # columns up to sign
    np.testing.assert_allclose(loadings @ loadings.T, expected @ expected.T, atol=1e-10)


def _log_likelihood(x, loadings, noise_var, mean) -> float:
    cov = loadings @ loadings.T + noise_var * np.eye(x.shape[1])
    return float(stats.multivariate_normal(mean, cov).logpdf(x).sum())


def test_no_optimiser_beats_the_ppca_likelihood():
    m = FactorModel(6, 2, 1.5, seed=0)
    x, _ = m.sample(300, np.random.default_rng(1))
    loadings, noise_var, mean = fit_ppca(x, 2)
    best = _log_likelihood(x, loadings, noise_var, mean)

    def negative(theta):
        b, log_var, mu = theta[:12].reshape(6, 2), theta[12], theta[13:]
        return -_log_likelihood(x, b, np.exp(log_var), mu)

    rng = np.random.default_rng(2)
    for start in range(3):
        theta0 = np.concatenate([rng.standard_normal(12), [0.0], np.zeros(6)])
        found = optimize.minimize(negative, theta0, method="L-BFGS-B")
        assert -found.fun <= best + 1e-6 * abs(best)
    # and the optimiser, started at the closed form, does not move it up
    theta = np.concatenate([loadings.ravel(), [np.log(noise_var)], mean])
    assert -optimize.minimize(negative, theta, method="L-BFGS-B").fun == pytest.approx(best, rel=1e-8)


def test_prefix_ppca_equals_ppca_on_each_prefix(model):
    x, _ = model.sample(300, np.random.default_rng(3))
    sizes = [10, 40, 41, 300]
    for device in (None, "cpu"):                          # numpy, and torch (the GPU path) on the CPU
        for m, (b, v, mu) in zip(sizes, prefix_ppca(x, sizes, 3, device=device, block=16)):
            b0, v0, mu0 = fit_ppca(x[:m], 3)
            np.testing.assert_allclose(b @ b.T, b0 @ b0.T, atol=1e-9)
            assert v == pytest.approx(v0, rel=1e-9)
            np.testing.assert_allclose(mu, mu0, atol=1e-12)
    with pytest.raises(ValueError, match="increase"):
        prefix_ppca(x, [40, 10], 3)


def test_posterior_mean_is_gaussian_conditioning(model):
    """E[z | x] = Cov(z, x) Cov(x)⁻¹ (x − μ) for the joint Gaussian (z, x): Cov(z, x) = Bᵀ."""
    x, _ = model.sample(50, np.random.default_rng(5))
    mu = np.full(model.dim, 0.3)
    features = posterior_mean_features(x + mu, model.loadings, model.noise_std ** 2, mu)
    expected = (model.loadings.T @ np.linalg.solve(model.covariance(), x.T)).T
    np.testing.assert_allclose(features, expected, atol=1e-10)


def test_ols_matches_scikit_learn():
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(0)
    f, y = rng.standard_normal((30, 4)), rng.standard_normal(30)
    w, c = ols(f, y)
    ref = LinearRegression().fit(f, y)
    np.testing.assert_allclose(w, ref.coef_, atol=1e-10)
    assert c == pytest.approx(ref.intercept_)


def test_ridge_loo_matches_n_refits_of_scikit_learn_ridge():
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(1)
    x = rng.standard_normal((25, 8)) + 2.0
    y = x @ rng.standard_normal(8) + 1.5 + rng.standard_normal(25)
    alphas = np.logspace(-2, 3, 7)
    loo = []
    for alpha in alphas:                                # leave each point out and refit: the slow way
        errs = [y[i] - Ridge(alpha=alpha).fit(np.delete(x, i, 0), np.delete(y, i)).predict(x[i:i + 1])[0]
                for i in range(len(y))]
        loo.append(np.mean(np.square(errs)))
    w, c, alpha = ridge_loo(x, y, alphas)
    assert alpha == alphas[int(np.argmin(loo))]
    ref = Ridge(alpha=alpha).fit(x, y)                  # scikit-learn's intercept is unpenalised too
    np.testing.assert_allclose(w, ref.coef_, atol=1e-9)
    assert c == pytest.approx(ref.intercept_)
    assert len(RIDGE_ALPHAS) == 33 and RIDGE_ALPHAS[0] == pytest.approx(1e-3) and RIDGE_ALPHAS[-1] == pytest.approx(1e5)


def test_ridge_loo_takes_the_first_minimiser():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 3))
    # a constant y: every α fits it exactly (LOO error 0 for all), so the first α is the minimiser
    assert ridge_loo(x, np.full(20, 1.7), [5.0, 1.0, 3.0])[2] == 5.0


def test_the_composite_predictor_is_erm_on_the_posterior_features(model):
    rng = np.random.default_rng(6)
    x_unlabeled, _ = model.sample(400, rng)
    x, y = model.sample(60, rng)
    x_new, _ = model.sample(10, rng)
    w, c = pretrain_predictor(x_unlabeled, x, y, 3)
    b, v, mu = fit_ppca(x_unlabeled, 3)
    w_phi, c_phi = ols(posterior_mean_features(x, b, v, mu), y)
    np.testing.assert_allclose(x_new @ w + c, posterior_mean_features(x_new, b, v, mu) @ w_phi + c_phi, atol=1e-10)
    w2, c2 = composite_predictor(b, v, mu, w_phi, c_phi)
    np.testing.assert_allclose(w2, w)


def test_the_oracle_reaches_bayes_risk_with_many_labels(model):
    x, y = model.sample(100_000, np.random.default_rng(8))
    assert model.excess_risk(*oracle_predictor(model, x, y)) < 1e-3
    assert model.excess_risk(*pretrain_predictor(x, x[:2000], y[:2000], 3)) < 0.02


def test_shuffling_columns_keeps_each_column_and_removes_the_covariance(model):
    x, _ = model.sample(20_000, np.random.default_rng(9))
    s = shuffle_columns(x, np.random.default_rng(0))
    np.testing.assert_array_equal(np.sort(s, axis=0), np.sort(x, axis=0))
    off = np.cov(s.T) - np.diag(np.diag(np.cov(s.T)))
    assert np.abs(off).max() < 5 / np.sqrt(len(x)) * np.diag(np.cov(s.T)).max()


def test_the_mixture_posterior_is_bayes_rule():
    task = GaussianMixtureTask(dim=5, components=3, separation=2.0, noise_std=0.9, seed=1)
    np.testing.assert_allclose(np.linalg.norm(task.means, axis=1), 2.0)
    x, y, z = task.sample(200, np.random.default_rng(0))
    np.testing.assert_array_equal(y, (z < 1.5).astype(int))
    dens = np.stack([stats.multivariate_normal(mu, 0.81 * np.eye(5)).pdf(x) for mu in task.means], axis=1)
    np.testing.assert_allclose(task.posterior(x), dens / dens.sum(axis=1, keepdims=True), atol=1e-12)
    p1 = dens[:, :2].sum(axis=1) / dens.sum(axis=1)                # P(y = 1 | x), classes {0, 1} of K = 3
    np.testing.assert_array_equal(task.bayes_predict(x), (p1 > 0.5).astype(int))


def test_em_pretraining_beats_logistic_regression_on_few_labels():
    from methods.unsup_pretrain import logistic_classifier, pretrain_em_classifier

    task = GaussianMixtureTask(dim=10, components=4, separation=2.0, seed=0)
    rng = np.random.default_rng(0)
    x, y, _ = task.sample(30, rng)
    xu, _, _ = task.sample(1000, rng)
    xt, yt, _ = task.sample(5000, rng)
    em = np.mean(pretrain_em_classifier(xu, x, y, 4, seed=0)(xt) != yt)
    logistic = np.mean(logistic_classifier(x, y)(xt) != yt)
    bayes = np.mean(task.bayes_predict(xt) != yt)
    assert em - bayes < 0.5 * (logistic - bayes)


@pytest.mark.parametrize("call, message", [
    (lambda: FactorModel(10, 0, 1.0), r"rank must be an integer in \[1, 10\)"),
    (lambda: FactorModel(10, 10, 1.0), r"rank must be an integer in \[1, 10\)"),
    (lambda: FactorModel(10, 2, 0.0), "spike"),
    (lambda: FactorModel(10, 2, 1.0, noise_std=0.0), "noise_std must be > 0"),
    (lambda: FactorModel(10, 2, 1.0, label_noise=-0.1), "label_noise must be >= 0"),
    (lambda: fit_ppca(np.ones((1, 5)), 2), "at least 2 points"),
    (lambda: fit_ppca(np.random.default_rng(0).standard_normal((9, 5)), 5), "rank"),
    (lambda: ols(np.ones((1, 3)), np.ones(1)), "at least 2 points"),
    (lambda: ols(np.ones((4, 3)), np.ones(5)), "shape"),
    (lambda: ridge_loo(np.ones((4, 3)), np.ones(4), [0.0, 1.0]), "positive"),
    (lambda: GaussianMixtureTask(5, 1, 1.0), "components"),
    (lambda: GaussianMixtureTask(5, 3, 0.0), "separation"),
    (lambda: GaussianMixtureTask(5, 3, 1.0, noise_std=-1.0), "noise_std"),
])
def test_bad_input_is_a_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_ppca_from_scatter_takes_the_top_eigenpairs():
    scatter = np.diag([1.0, 5.0, 2.0, 1.0])
    loadings, noise_var, _ = ppca_from_scatter(scatter, np.zeros(4), 1)
    assert noise_var == pytest.approx(4.0 / 3)
    np.testing.assert_allclose(np.abs(loadings[:, 0]), [0, np.sqrt(5 - 4 / 3), 0, 0], atol=1e-12)


def test_ridge_loo_skips_an_alpha_whose_loo_residual_is_zero_over_zero():
    """Two points: at α = 1e-30 the fit interpolates in floating point (leverage exactly 1, residual
    exactly 0), so its LOO residual is 0/0; such an α is never chosen (np.argmin would pick the nan)."""
    w, c, alpha = ridge_loo(np.array([[0.0], [2.0]]), np.array([-1.0, 1.0]), [1e-30, 1.0])
    assert alpha == 1.0 and np.all(np.isfinite(w)) and np.isfinite(c)
