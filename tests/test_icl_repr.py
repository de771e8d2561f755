"""icl_repr (issue #49): Φ* against its formula, Haar weights, seeds, the first layer's second
moment, the prompt variances, the Bayes rule against the Gaussian posterior mean per prefix and
below other penalties, its risk against σ² plus the posterior predictive variance (Monte Carlo), the probes
against scikit-learn and their token indices against a stub model, the controls, bad input, one smoke run."""
import math

import numpy as np
import pytest
import torch

from methods.icl_repr import (RandomReluFeatures, RandomRepresentation, affine_features, bayes_predictions, choose_lambda, haar_matrix,
                              prefix_mean_predictions, probe_metrics, probe_r2, ridge_predictions, risks,
                              sample_prompts)
from methods.icl_repr.probes import low_max


def _phi_numpy(x, weights, leak):
    g = math.sqrt(2 / (1 + leak ** 2))
    h = x
    for w in weights:
        pre = g * (h @ w.T)
        h = np.where(pre > 0, pre, leak * pre)
    return h


@pytest.mark.parametrize("dim,rep_dim,depth", [(4, 4, 2), (3, 5, 3), (6, 2, 1)])
def test_phi_against_its_formula_and_orthonormal_weights(dim, rep_dim, depth):
    rep = RandomRepresentation(dim, rep_dim, depth, leak=0.2, seed=5)
    assert len(rep.weights) == depth and all(w.dtype == torch.float64 for w in rep.weights)
    w1 = rep.weights[0].numpy()
    assert w1.shape == (rep_dim, dim)
    gram = w1.T @ w1 if rep_dim >= dim else w1 @ w1.T               # columns, or rows when D < d
    np.testing.assert_allclose(gram, np.eye(min(dim, rep_dim)), atol=1e-12)
    for w in rep.weights[1:]:
        np.testing.assert_allclose(w.numpy() @ w.numpy().T, np.eye(rep_dim), atol=1e-12)
    x = torch.randn(7, 5, dim)
    out = rep.rep(x)
    assert out.shape == (7, 5, rep_dim) and out.dtype == torch.float32
    np.testing.assert_allclose(rep.rep(x.double()).numpy(), _phi_numpy(x.double().numpy(), [w.numpy() for w in rep.weights], 0.2),
                               rtol=1e-12, atol=1e-12)


def test_haar_signs_follow_diag_r_and_seeds():
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    q = haar_matrix(5, 3, torch.Generator().manual_seed(0))
    # Q diag(sign R) R' = G with R' = diag(sign R) R, whose diagonal is positive: the unique QR
    r = q.T @ g
    assert torch.allclose(q @ r, g) and (torch.diagonal(r) > 0).all() and torch.allclose(r, r.triu(), atol=1e-12)
    a, b, c = (RandomRepresentation(4, 4, 2, seed=s) for s in (1, 1, 2))
    assert all(torch.equal(u, v) for u, v in zip(a.weights, b.weights))
    assert not torch.equal(a.weights[0], c.weights[0])


def test_first_layer_keeps_unit_second_moment():
    # d = D: W x ~ N(0, I), act(g z)² has mean g² (1 + leak²) / 2 = 1
    leak, n = 0.1, 200_000
    rep = RandomRepresentation(3, 3, depth=1, leak=leak, seed=0)
    h2 = rep.rep(torch.randn(n, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)).square()
    g = math.sqrt(2 / (1 + leak ** 2))
    var = g ** 4 * 3 * (1 + leak ** 4) / 2 - 1                    # Var h² = E h⁴ − 1, E z⁴ = 3 on each half
    assert np.allclose(h2.mean(0).numpy(), 1.0, atol=5 * math.sqrt(var / n))


def test_prompt_variances_of_w_and_noise():
    rep = RandomRepresentation(3, 5, 2, seed=0)
    n, k, sigma = 20_000, 4, 0.3
    xs, ys, ws = sample_prompts(rep, n, k, sigma, torch.Generator().manual_seed(2), dtype=torch.float64)
    assert xs.shape == (n, k, 3) and ys.shape == (n, k) and ws.shape == (n, 5)
    # w ~ N(0, I / D): E w_j² = 1/D, Var w_j² = 2/D²
    assert np.allclose(ws.square().mean(0).numpy(), 1 / 5, atol=5 * math.sqrt(2 / 25 / n))
    noise = ys - torch.einsum("bkD,bD->bk", rep.rep(xs), ws)
    assert abs(noise.square().mean().item() - sigma ** 2) < 5 * sigma ** 2 * math.sqrt(2 / (n * k))
    assert abs(noise.mean().item()) < 5 * sigma / math.sqrt(n * k)
    same = sample_prompts(rep, n, k, sigma, torch.Generator().manual_seed(2), dtype=torch.float64)
    assert torch.equal(same[1], ys)


def test_bayes_is_the_gaussian_posterior_mean_per_prefix():
    rep = RandomRepresentation(3, 4, 2, seed=1)
    sigma = 0.4
    xs, ys, _ = sample_prompts(rep, 3, 7, sigma, torch.Generator().manual_seed(0), dtype=torch.float64)
    got = bayes_predictions(xs, ys, rep, sigma).numpy()
    phi = rep.rep(xs).numpy()
    D = 4
    for b in range(3):
        assert got[b, 0] == 0
        for i in range(1, 7):
            F, y = phi[b, :i], ys[b, :i].numpy()
            cov = np.linalg.inv(F.T @ F / sigma ** 2 + D * np.eye(D))     # prior precision D I, noise σ²
            mean = cov @ F.T @ y / sigma ** 2
            assert got[b, i] == pytest.approx(phi[b, i] @ mean, rel=1e-9, abs=1e-12)


def test_bayes_has_lower_risk_than_other_penalties():
    rep = RandomRepresentation(4, 4, 2, seed=3)
    sigma = 0.5
    xs, ys, _ = sample_prompts(rep, 4000, 10, sigma, torch.Generator().manual_seed(4), dtype=torch.float64)
    bayes = risks(bayes_predictions(xs, ys, rep, sigma), ys)["risk"]
    phi = rep.rep(xs)
    for lam in (0.0, sigma ** 2 * 4 / 10, sigma ** 2 * 4 * 10):
        assert bayes < risks(ridge_predictions(phi, ys, lam), ys)["risk"]


def test_controls_prefix_mean_affine_features_risks_and_lambda_choice():
    ys = torch.tensor([[1.0, 3.0, 2.0, 6.0]])
    torch.testing.assert_close(prefix_mean_predictions(ys), torch.tensor([[0.0, 1.0, 2.0, 2.0]]))
    f = affine_features(torch.zeros(2, 3, 2))
    assert f.shape == (2, 3, 3) and torch.equal(f[..., -1], torch.ones(2, 3))
    preds = torch.zeros(2, 4)
    y = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.0, 2.0]])
    r = risks(preds, y)
    assert r["risk"] == pytest.approx(np.mean([2.0, 5.0, 10.0])) and r["risk_late"] == pytest.approx(np.mean([5.0, 10.0]))
    # with no noise and many examples the least penalty wins; with pure noise the largest
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 12, 3, generator=gen)
    assert choose_lambda(x, (x @ torch.ones(3)), [0.01, 1.0, 100.0]) == 0.01
    assert choose_lambda(x, torch.randn(200, 12, generator=gen), [0.01, 1.0, 100.0]) == 100.0


@pytest.mark.parametrize("targets", [1, 3])
def test_probe_r2_is_scikit_learn_ridge_with_variance_weighted_r2(targets):
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score

    rng = np.random.default_rng(0)
    h, hv = rng.normal(size=(80, 6)) + 2.0, rng.normal(size=(70, 6)) + 2.0
    coef = rng.normal(size=(6, targets)) * np.array([1, 5, 0.1])[:targets]
    t, tv = h @ coef + rng.normal(size=(80, targets)) + 3.0, hv @ coef + rng.normal(size=(70, targets)) + 3.0
    if targets == 1:
        t, tv = t[:, 0], tv[:, 0]
    for alpha in (1e-3, 10.0):
        expected = r2_score(tv, Ridge(alpha=alpha, fit_intercept=True).fit(h, t).predict(hv),
                            multioutput="variance_weighted")
        assert probe_r2(h, t, hv, tv, alpha) == pytest.approx(expected, rel=1e-10, abs=1e-12)
        assert probe_r2(torch.tensor(h), torch.tensor(t), torch.tensor(hv), torch.tensor(tv), alpha) == pytest.approx(expected, rel=1e-10)


class _IndexedStates(torch.nn.Module):
    """A stub model whose hidden states encode what each token should hold: state 0 puts [Φ*(x_i),
    Bayes_i] on the x token 2i and noise on the y token 2i + 1; state 1 the reverse."""

    def __init__(self, phi, bayes):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.phi, self.bayes = phi, bayes

    def hidden_states(self, xs, ys):
        b, k = ys.shape
        signal = torch.cat([self.phi, self.bayes[..., None]], dim=-1)           # (B, k, D + 1)
        noise = torch.randn(b, k, signal.shape[-1], generator=torch.Generator().manual_seed(7), dtype=signal.dtype)
        s0 = torch.stack([signal, noise], dim=2).reshape(b, 2 * k, -1)          # x token 2i, y token 2i + 1
        s1 = torch.stack([noise, signal], dim=2).reshape(b, 2 * k, -1)
        return s0, s1


def test_probes_read_x_tokens_at_2i_y_tokens_at_2i_plus_1_from_position_k_over_2():
    from methods.icl_repr.probes import probe_curves

    gen = torch.Generator().manual_seed(0)
    b, k, d_rep = 60, 8, 3
    phi = torch.randn(b, k, d_rep, generator=gen, dtype=torch.float64)
    bayes = torch.randn(b, k, generator=gen, dtype=torch.float64)
    # the first k/2 positions carry targets the states do not encode: a probe that used them would fit worse
    phi[:, : k // 2], bayes[:, : k // 2] = 0.0, 0.0
    states_phi = phi.clone()
    states_phi[:, : k // 2] = torch.randn(b, k // 2, d_rep, generator=gen, dtype=torch.float64)
    model = _IndexedStates(states_phi, bayes)
    xs, ys = torch.randn(b, k, 2, generator=gen), torch.randn(b, k, generator=gen)
    curves = probe_curves(model, xs, ys, phi, bayes, alpha=1e-6)
    assert curves["phi_x"][0] > 0.999 and curves["bayes_x"][0] > 0.999 and curves["phi_y"][1] > 0.999
    assert curves["phi_x"][1] < 0.2 and curves["bayes_x"][1] < 0.2 and curves["phi_y"][0] < 0.2


def test_bayes_risk_is_noise_plus_posterior_predictive_variance_monte_carlo():
    """Over prompts with w from the prior, the Bayes row's risk at position i is σ² + E φ_iᵀ Σ_i φ_i with
    Σ_i = (F_iᵀF_i/σ² + D I)⁻¹ from the prefix (the exact conditional risk averaged over the same x's),
    and no ridge penalty on Φ*(x) does better."""
    rep = RandomRepresentation(3, 4, 2, seed=5)
    sigma, d_rep, k = 0.5, 4, 6
    xs, ys, _ = sample_prompts(rep, 20000, k, sigma, torch.Generator().manual_seed(1), dtype=torch.float64)
    curve = ((bayes_predictions(xs, ys, rep, sigma) - ys) ** 2).mean(0)
    phi = rep.rep(xs)
    expected = []
    for i in range(k):
        prec = phi[:, :i].transpose(1, 2) @ phi[:, :i] / sigma ** 2 + d_rep * torch.eye(d_rep, dtype=torch.float64)
        var = (phi[:, i, None, :] @ torch.linalg.solve(prec, phi[:, i, :, None])).squeeze()
        expected.append(sigma ** 2 + var.mean())
    torch.testing.assert_close(curve, torch.stack(expected), rtol=0.03, atol=0)
    bayes = float(curve[1:].mean())
    for lam in (0.0, 0.25, 0.5, 2.0, 4.0):           # σ²D = 1.0 is the Bayes penalty
        assert bayes < risks(ridge_predictions(phi, ys, lam), ys)["risk"]


def test_probe_metrics_choose_their_layers():
    curves = {"phi_x": [0.1, 0.5, 0.9, 0.3, 0.2], "bayes_x": [0.0, 0.2, 0.4, 0.8, 0.7], "phi_y": [0.0, 0.3, 0.1, 0.6, 0.2]}
    got = probe_metrics(curves)
    rises = {"bayes_rise": got.pop("bayes_rise"), "phi_rise": got.pop("phi_rise")}
    assert got == {"phi_r2_emb": 0.1, "phi_r2_low": 0.9, "bayes_r2_low": 0.4, "bayes_r2_top": 0.7, "phi_y_r2": 0.6}
    # the profile: block depth - 1 = 3 minus block 1, never the last state
    assert rises == pytest.approx({"bayes_rise": 0.8 - 0.2, "phi_rise": 0.3 - 0.5})
    assert low_max([0.0, 0.2, 0.7, 0.9, 1.0]) == 0.7


def test_random_relu_features_against_their_formula_and_seed():
    xs = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    rff = RandomReluFeatures(4, 7, seed=3)
    gen = torch.Generator().manual_seed(3)               # G then c, float64
    g = torch.randn(4, 7, generator=gen, dtype=torch.float64).numpy() / 2.0
    c = torch.randn(7, generator=gen, dtype=torch.float64).numpy()
    x = xs.double().numpy()
    expected = np.concatenate([np.maximum(x @ g + c, 0) / math.sqrt(7), np.ones((3, 5, 1))], axis=-1)
    np.testing.assert_allclose(rff.features(xs).numpy(), expected, rtol=1e-12)
    assert torch.equal(RandomReluFeatures(4, 7, seed=3).features(xs), rff(xs))
    assert not torch.equal(RandomReluFeatures(4, 7, seed=4).features(xs), rff(xs))
    with pytest.raises(ValueError, match="num_features=0"):
        RandomReluFeatures(4, 0)
    with pytest.raises(ValueError, match="width 4, got width 3"):
        rff.features(torch.randn(2, 3))


def test_wrong_phi_row_is_the_bayes_rule_of_another_representation_and_loses_to_bayes():
    """ridge_wrong_phi = ridge on Φ'(x) with λ = σ²D, Φ' another seed's MLP (a stream of the run seed);
    ridge_rff reads the random features at its chosen λ; the true Bayes rule beats both."""
    from methods.icl_repr import stages
    rep = stages.representation(0, 3, 3)
    wrong, rff = stages.wrong_representation(0, 3, 3), stages.random_features(0, 3, 8)
    assert not torch.equal(wrong.weights[0], rep.weights[0])
    xs, ys, _ = stages.stream_prompts(rep, 400, 10, 0.2, 0, stages.TEST_STREAM)
    lambdas = {"ridge_x": 1.0, "ridge_affine": 1.0, "ridge_rff": 0.1}
    preds = stages.all_predictions(xs, ys, rep, 0.2, lambdas, None, rff, wrong)
    torch.testing.assert_close(preds["ridge_wrong_phi"], ridge_predictions(wrong.rep(xs.double()), ys, 0.2 ** 2 * 3))
    torch.testing.assert_close(preds["ridge_rff"], ridge_predictions(rff.features(xs), ys, 0.1))
    late = {name: risks(p, ys)["risk_late"] for name, p in preds.items()}
    assert late["bayes"] < late["ridge_wrong_phi"] and late["bayes"] < late["ridge_rff"]


def test_bad_input():
    with pytest.raises(ValueError, match="dim=0, rep_dim=4, depth=2"):
        RandomRepresentation(0, 4, 2)
    with pytest.raises(ValueError, match="depth=0"):
        RandomRepresentation(2, 4, 0)
    with pytest.raises(ValueError, match=r"leak must lie in \[0, 1\), got 1.0"):
        RandomRepresentation(2, 4, 2, leak=1.0)
    rep = RandomRepresentation(2, 3, 1)
    with pytest.raises(ValueError, match="x of width 2, got width 3"):
        rep.rep(torch.randn(4, 3))
    with pytest.raises(ValueError, match="noise_std must be >= 0, got -0.1"):
        sample_prompts(rep, 2, 3, -0.1)
    with pytest.raises(ValueError, match="noise_std must be >= 0, got -1"):
        bayes_predictions(torch.randn(2, 3, 2), torch.randn(2, 3), rep, -1)
    with pytest.raises(ValueError, match=r"\(2, 3, 2\) and \(2, 4\)"):
        bayes_predictions(torch.randn(2, 3, 2), torch.randn(2, 4), rep, 0.1)
    with pytest.raises(ValueError, match="probe shapes do not match"):
        probe_r2(np.zeros((5, 2)), np.zeros(4), np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        probe_r2(np.zeros((5, 2)), np.zeros(5), np.zeros((3, 2)), np.zeros(3), alpha=-1)


def test_smoke_run_reports_every_row(compose_cfg, tmp_path):
    """run(cfg, ctx) on the smoke config: `<row>/<metric>` names that reproduce.py turns into the mini
    table's sub-rows, with every declared metric of each; the plot lands in the run dir."""
    from common.reproduce.tables import expand_rows
    from common.runner import run_method

    metrics = run_method(compose_cfg(["experiment=icl_repr_smoke", f"run_dir={tmp_path}"]))
    rows = expand_rows({"icl_repr": [{"seed": 0, **metrics}]})
    mini = compose_cfg(["experiment=icl_repr_mini"]).table
    assert set(rows) == set(mini.sub_rows)
    for name, row in rows.items():
        wanted = {"risk", "risk_late"} if not name.endswith("_probe") else {
            "phi_r2_emb", "phi_r2_low", "bayes_r2_low", "bayes_r2_top", "phi_y_r2", "bayes_rise", "phi_rise"}
        if name == "wrong_phi_probe":
            wanted = {"phi_r2_low", "phi_gain_low"}
        assert set(row[0]) >= wanted and np.isfinite([row[0][m] for m in wanted]).all()
    assert metrics["bayes/risk_late"] < metrics["prefix_mean/risk_late"]
    assert np.isfinite(metrics["transformer_probe/phi_gain_low"]) and "ridge_rff/lam" in metrics
    assert (tmp_path / "risk_vs_position.png").exists() and (tmp_path / "risk_curves.json").exists()
