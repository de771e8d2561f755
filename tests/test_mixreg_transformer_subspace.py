"""mixreg_transformer's paper-tier pieces: the subspace algorithm (Kong et al. 2020) against a
slow loop and its expectation, its subspace and components against the truth, the covariate-
scale shift against a re-draw of the same prompts, and run(cfg, ctx) with both switched on."""
import numpy as np
import pytest
import torch
from scipy.linalg import subspace_angles
from scipy.optimize import linear_sum_assignment

from methods.mixreg_transformer import (MixtureOfRegressions, batch_em, estimate_subspace, ols_predictions,
                                        posterior_mean_predictions, stages, subspace_components, subspace_matrix)
from methods.mixreg_transformer.subspace import cluster_least_squares, half_moments


def prompts(batch, length, dim, m, sigma, seed=0, dtype=torch.float64):
    mix = MixtureOfRegressions(dim, m, sigma, seed=seed, dtype=dtype)
    xs, ys, comp = mix.sample(batch, length, torch.Generator().manual_seed(seed + 1))
    return mix, xs, ys, comp


def matched_errors(true: torch.Tensor, estimate: torch.Tensor) -> np.ndarray:
    """‖w*_j − ŵ_π(j)‖ under the best permutation π (Hungarian matching on the distances)."""
    cost = torch.cdist(true.double(), estimate.double()).numpy()
    rows, cols = linear_sum_assignment(cost)
    return cost[rows, cols]


# --- the subspace matrix --------------------------------------------------------------------
@pytest.mark.parametrize("length", [6, 7])      # even and odd: the halves are ⌊k/2⌋ and the rest
def test_subspace_matrix_matches_a_loop(length):
    _, xs, ys, _ = prompts(5, length, 3, 2, 0.5)
    x, y = xs.numpy(), ys.numpy()
    half = length // 2
    expect = np.zeros((3, 3))
    for b in range(len(x)):
        sa = sum(y[b, t] * x[b, t] for t in range(half))
        sb = sum(y[b, t] * x[b, t] for t in range(half, length))
        expect += (np.outer(sa, sb) + np.outer(sb, sa)) / 2 / (half * (length - half))
    np.testing.assert_allclose(subspace_matrix(xs, ys).numpy(), expect / len(x), rtol=1e-12, atol=1e-14)


def test_subspace_matrix_is_unbiased_for_the_second_moment_of_the_components():
    """E M = Σ_j w_j w_jᵀ / m for x ~ N(0, I): every entry within 5 standard errors, the standard
    error estimated from the per-prompt matrices themselves. The same check on the one-half
    product β̂_A β̂_Aᵀ (biased by the noise of β̂_A, (‖w‖² + σ²) I / |A| + w wᵀ / |A|) fails, so
    the tolerance is tight enough to see a bias of that size."""
    batch, length, dim, m, sigma = 20000, 6, 4, 3, 0.5
    mix, xs, ys, _ = prompts(batch, length, dim, m, sigma, seed=3)
    target = (mix.components.T @ mix.components / m).numpy()
    a, b = half_moments(xs, ys)
    per_prompt = ((a[:, :, None] * b[:, None, :] + b[:, :, None] * a[:, None, :]) / 2).numpy()   # (B, d, d)
    stderr = per_prompt.std(0, ddof=1) / np.sqrt(batch)
    assert np.all(np.abs(subspace_matrix(xs, ys).numpy() - target) <= 5 * stderr)
    biased = (a[:, :, None] * a[:, None, :]).numpy()
    assert np.any(np.abs(biased.mean(0) - target) > 5 * biased.std(0, ddof=1) / np.sqrt(batch))


def test_subspace_spans_the_true_components_on_clean_data():
    """σ = 0, m = 3 well-separated draws in d = 8: every principal angle between span(U) and
    span(w*_1..w*_m) is below 0.1 rad (a random 3-dim subspace of R^8 has its largest angle near
    π/2), and U is orthonormal."""
    mix, xs, ys, _ = prompts(3000, 20, 8, 3, 0.0, seed=4)
    basis = estimate_subspace(xs, ys, 3)
    assert basis.shape == (8, 3)
    torch.testing.assert_close(basis.T @ basis, torch.eye(3, dtype=basis.dtype), atol=1e-10, rtol=0)
    assert subspace_angles(basis.numpy(), mix.components.T.numpy()).max() < 0.1
    rand = torch.linalg.qr(torch.randn(8, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[0]
    assert subspace_angles(rand.numpy(), mix.components.T.numpy()).max() > 0.5


def test_more_components_than_dimensions_keeps_the_whole_space():
    _, xs, ys, _ = prompts(200, 8, 3, 5, 0.1)
    assert estimate_subspace(xs, ys, 5).shape == (3, 3)
    assert subspace_components(xs, ys, 5).shape == (5, 3)


# --- the components -------------------------------------------------------------------------
def test_components_are_recovered_at_small_noise():
    """σ = 0.1, d = 8, m = 3, 3,000 prompts of 20 examples. The cluster refit alone lands within
    0.1 of every component (up to permutation); a few EM iterations from there reach the
    least-squares noise level, σ √(d / (examples per component)) ≈ 0.002, within 0.01."""
    mix, xs, ys, _ = prompts(3000, 20, 8, 3, 0.1, seed=5)
    refit = subspace_components(xs, ys, 3, seed=0)
    assert refit.dtype == ys.dtype and refit.shape == (3, 8)
    assert matched_errors(mix.components, refit).max() < 0.1
    polished = subspace_components(xs, ys, 3, noise_std=0.1, seed=0, em_iters=5)
    assert matched_errors(mix.components, polished).max() < 0.01
    torch.testing.assert_close(subspace_components(xs, ys, 3, seed=0), refit)       # seeded: reproducible


def unequal_norm_prompts(norms, batch, length, dim, sigma, seed):
    """Prompts of components along orthonormal directions q_j with the given norms (the regime
    where a prompt's moment estimate is noisier for a longer component): (q, w, comp, xs, ys)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(dim, len(norms), generator=gen, dtype=torch.float64))[0]   # (d, m)
    w = q.T * torch.tensor(norms, dtype=torch.float64)[:, None]                                  # (m, d)
    comp = torch.randint(len(norms), (batch,), generator=gen)
    xs = torch.randn(batch, length, dim, generator=gen, dtype=torch.float64)
    ys = torch.einsum("bkd,bd->bk", xs, w[comp]) + sigma * torch.randn(batch, length, generator=gen, dtype=torch.float64)
    return q, w, comp, xs, ys


def test_subspace_spans_components_of_unequal_norms_within_the_perturbation_bound():
    """Norms 1, 2.5, 5 (σ = 0.1, d = 8, 4,000 prompts of 40). E M = Σ_j w_j w_jᵀ / m has
    eigenvectors q_j with eigenvalues λ_j = ‖w_j‖² / m and 0 on the complement, so to first order
    in E = M − E M the sines of the principal angles are the columns P⊥ E q_j / λ_j, and
    E ‖P⊥ E q_j / λ_j‖² = Σ var(P⊥ Z_b q_j / λ_j) / n with Z_b = sym(β̂_A β̂_Bᵀ) the per-prompt
    terms of M. The root of the sum over j is the rms of the first-order ‖sin Θ‖_F, which
    bounds the largest angle's sine; the largest angle must lie within 3 times it. That bound is
    below 0.25 rad, and a random 3-dim subspace (or the eigenvectors of the smallest
    eigenvalues) lies far outside it."""
    norms, batch, length, dim, sigma = [1.0, 2.5, 5.0], 4000, 40, 8, 0.1
    q, w, _, xs, ys = unequal_norm_prompts(norms, batch, length, dim, sigma, seed=0)
    a, b = half_moments(xs, ys)
    z = (a[:, :, None] * b[:, None, :] + b[:, :, None] * a[:, None, :]) / 2                   # (B, d, d)
    perp = torch.eye(dim, dtype=torch.float64) - q @ q.T
    lam = torch.tensor(norms, dtype=torch.float64) ** 2 / len(norms)
    first_order = torch.einsum("de,bef,fj->bjd", perp, z, q) / lam[None, :, None]           # (B, m, d)
    bound = 3 * (first_order.var(0).sum().item() / batch) ** 0.5
    assert bound < 0.25
    basis = estimate_subspace(xs, ys, 3)
    assert subspace_angles(basis.numpy(), w.T.numpy()).max() < bound
    rand = torch.linalg.qr(torch.randn(dim, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64))[0]
    assert subspace_angles(rand.numpy(), w.T.numpy()).max() > 2 * bound


def test_em_refinement_recovers_components_of_unequal_norms():
    """Norms 0.5, 2, 5 (σ = 0.1, d = 8, 1,500 prompts of 20): `em_iters` refines the cluster
    refit to the fixed point EM reaches from the true components, and so to least squares on
    the true clusters: ‖ŵ_j − w_j‖² ≈ σ² d / N_j (N_j examples of component j, a χ²_d scale), so
    every error lies within 4 σ √(d / min_j N_j)."""
    norms, batch, length, dim, sigma = [0.5, 2.0, 5.0], 1500, 20, 8, 0.1
    _, w, comp, xs, ys = unequal_norm_prompts(norms, batch, length, dim, sigma, seed=0)
    refined = subspace_components(xs, ys, 3, noise_std=sigma, seed=0, em_iters=5)
    from_truth = batch_em(xs, ys, 3, sigma, iters=5, init=w)
    cost = torch.cdist(w, refined).numpy()
    rows, cols = linear_sum_assignment(cost)
    examples = torch.bincount(comp, minlength=3).min().item() * length
    assert cost[rows, cols].max() < 4 * sigma * (dim / examples) ** 0.5
    torch.testing.assert_close(refined[cols], from_truth[rows], rtol=0, atol=1e-9)


def test_cluster_refit_is_least_squares_on_the_stacked_cluster_prompts():
    _, xs, ys, _ = prompts(12, 5, 3, 2, 0.5)
    labels = np.array([0, 1, 2] * 4)
    fit = cluster_least_squares(xs, ys, labels, 3).numpy()
    for j in range(3):
        x, y = xs[labels == j].reshape(-1, 3).numpy(), ys[labels == j].reshape(-1).numpy()
        np.testing.assert_allclose(fit[j], np.linalg.lstsq(x, y, rcond=None)[0], rtol=1e-10, atol=1e-12)


def test_subspace_keeps_the_input_dtype():
    _, xs, ys, _ = prompts(300, 10, 4, 2, 0.1, dtype=torch.float32)
    assert subspace_components(xs, ys, 2).dtype == torch.float32


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_components=0), "num_components must be >= 1 and at most the 40 prompts, got 0"),
    (dict(num_components=41), "num_components must be >= 1 and at most the 40 prompts, got 41"),
    (dict(num_components=2, em_iters=-1), "em_iters must be >= 0, got -1"),
    (dict(num_components=2, em_iters=3), "em_iters=3 needs noise_std"),
    (dict(num_components=2, noise_std=-0.5), "noise_std must be >= 0, got -0.5"),
])
def test_bad_input_names_the_value(kwargs, message):
    _, xs, ys, _ = prompts(40, 6, 3, 2, 0.1)
    with pytest.raises(ValueError, match=message):
        subspace_components(xs, ys, **kwargs)


def test_bad_prompts_name_the_shapes():
    _, xs, ys, _ = prompts(10, 6, 3, 2, 0.1)
    with pytest.raises(ValueError, match=r"got \(10, 6, 3\) and \(10, 5\)"):
        subspace_components(xs, ys[:, :5], 2)
    with pytest.raises(ValueError, match="at least 2 examples.*got 1"):
        subspace_components(xs[:, :1], ys[:, :1], 2)
    with pytest.raises(ValueError, match="at least 2 examples.*got 1"):
        subspace_matrix(xs[:, :1], ys[:, :1])


# --- the covariate-scale shift ----------------------------------------------------------------
def test_scaled_prompts_redraw_the_same_prompts_with_scaled_x():
    """s x and ⟨w_j, s x⟩ + σε with the same j, x and ε: re-drawn from the sampler's generator in
    its order (component, x, noise)."""
    mix = MixtureOfRegressions(4, 3, 0.5, seed=0, dtype=torch.float64)
    xs, ys, comp = mix.sample(50, 7, torch.Generator().manual_seed(9))
    gen = torch.Generator().manual_seed(9)
    j = torch.randint(3, (50,), generator=gen)
    x = torch.randn(50, 7, 4, generator=gen, dtype=torch.float64)
    eps = torch.randn(50, 7, generator=gen, dtype=torch.float64)
    sx, sy = stages.scaled_prompts(xs, ys, mix.components, comp, 2.5)
    torch.testing.assert_close(sx, 2.5 * x, rtol=0, atol=0)
    torch.testing.assert_close(sy, torch.einsum("bkd,bd->bk", 2.5 * x, mix.components[j]) + 0.5 * eps)
    same = stages.scaled_prompts(xs, ys, mix.components, comp, 1.0)
    assert torch.equal(same[0], xs) and torch.equal(same[1], ys)
    assert stages.scale_name(0.5) == "x0p5" and stages.scale_name(2) == "x2"
    with pytest.raises(ValueError, match="must be > 0, got 0"):
        stages.scaled_prompts(xs, ys, mix.components, comp, 0)


def test_shift_at_scale_one_is_the_unshifted_metric():
    mix = MixtureOfRegressions(4, 3, 0.5, seed=2)
    xs, ys, comp = stages.test_prompts(mix, 64, 8, seed=2)
    em = mix.components + 0.1
    plain = stages.procedure_metrics(stages.all_predictions(xs, ys, mix.components, 0.5, em_components=em), ys, 4)
    shifted = stages.shifted_metrics(xs, ys, comp, mix.components, 0.5, [1.0, 2.0], em_components=em)
    assert set(shifted) == set(plain) == {"posterior_mean", "argmin", "ridge", "ols", "zero", "em"}
    for name in plain:
        assert shifted[name]["nmse_x1"] == plain[name]["nmse"]
    # at s = 2 the signal's variance is 4 times larger, and so is the posterior mean's error
    assert shifted["posterior_mean"]["nmse_x2"] > plain["posterior_mean"]["nmse"]
    assert np.isfinite(shifted["ols"]["nmse_x2"])


def test_all_predictions_adds_the_subspace_row():
    mix, xs, ys, _ = prompts(20, 6, 3, 2, 0.5)
    est = mix.components * 1.1
    preds = stages.all_predictions(xs, ys, mix.components, 0.5, subspace_components=est)
    assert set(preds) == {"posterior_mean", "argmin", "ridge", "ols", "zero", "subspace"}
    torch.testing.assert_close(preds["subspace"], posterior_mean_predictions(xs, ys, est, 0.5))
    torch.testing.assert_close(preds["ols"], ols_predictions(xs, ys))


# --- run(cfg, ctx) ----------------------------------------------------------------------------
def test_run_reports_the_subspace_row_and_the_shifted_metrics(compose_cfg, tmp_path):
    """The smoke run with method.subspace=true and eval.x_scales=[2]: a sixth row `subspace`, and
    `nmse_x2` in every row."""
    from common.reproduce.tables import expand_rows
    from common.runner import run_method

    cfg = compose_cfg(["experiment=mixreg_transformer_smoke", f"run_dir={tmp_path}", "method.subspace=true",
                       "eval.x_scales=[2]"])
    metrics = run_method(cfg)
    rows = expand_rows({"mixreg_transformer": [{"seed": 0, **metrics}]})
    assert set(rows) == {"transformer", "posterior_mean", "argmin", "ridge", "ols", "zero", "em", "subspace"}
    for name, row in rows.items():
        assert {"nmse", "dist_pm", "nmse_x2"} <= set(row[0]), name
    assert np.isfinite(list(metrics.values())).all()
