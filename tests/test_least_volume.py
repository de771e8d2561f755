"""Least Volume: the penalties against independent derivations, the Lipschitz decoders, the
pruning/importance metrics on a linear (PCA) autoencoder, and PCA recovery by LV training."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from methods.least_volume import (ConvLeastVolumeAE, LeastVolumeAE, digits_splits, explained_reconstruction,
                                  fit_autoencoder, importance_correlation, l1_std_penalty, l2_loss, lasso_penalty,
                                  latent_dim, manifold_splits, pca_autoencoder, pruned_latents, pruned_loss,
                                  pruning_curve, spectral_norm_conv, student_t_penalty, volume_penalty)
from methods.least_volume.lipschitz import conv_linear_map


def gen(seed):
    return torch.Generator().manual_seed(seed)


def latents(n=40, m=6, seed=0, dtype=torch.float64):
    scales = torch.logspace(-2, 1, m, dtype=dtype)
    return torch.randn(n, m, generator=gen(seed), dtype=dtype) * scales + 3.0


# ---------------------------------------------------------------- penalties

def test_volume_penalty_matches_numpy_geometric_mean():
    z = latents()
    for eta in (0.0, 1.0, 3.0):
        sigma = np.std(z.numpy(), axis=0, ddof=1)
        expected = np.prod(sigma + eta) ** (1 / z.shape[1])
        assert volume_penalty(z, eta).item() == pytest.approx(expected, rel=1e-12)


def test_baseline_penalties_match_numpy():
    z = latents(seed=1)
    zn = z.numpy()
    assert l1_std_penalty(z).item() == pytest.approx(np.abs(np.std(zn, 0, ddof=1)).sum() / zn.shape[1], rel=1e-12)
    assert lasso_penalty(z).item() == pytest.approx(np.abs(zn).mean(), rel=1e-12)
    assert student_t_penalty(z).item() == pytest.approx(np.log(1 + zn ** 2).mean(), rel=1e-12)


def test_volume_penalty_shift_and_permutation_invariant():
    z = latents(seed=2)
    base = volume_penalty(z).item()
    shift = torch.randn(z.shape[1], generator=gen(3), dtype=z.dtype) * 100
    assert volume_penalty(z + shift).item() == pytest.approx(base, rel=1e-10)
    assert volume_penalty(z[torch.randperm(len(z), generator=gen(4))]).item() == pytest.approx(base, rel=1e-12)
    assert volume_penalty(z[:, torch.randperm(z.shape[1], generator=gen(5))]).item() == pytest.approx(base, rel=1e-12)
    # but not invariant to moving mass between dimensions with the same L1 norm of stds
    assert volume_penalty(z * torch.tensor([2.0, 1, 1, 1, 1, 0.5], dtype=z.dtype)).item() != pytest.approx(base, rel=1e-3)


def test_volume_penalty_is_homogeneous_in_z_and_eta():
    z = latents(seed=6)
    for c, eta in ((0.1, 1.0), (7.0, 0.5), (3.0, 0.0)):
        assert (c * volume_penalty(z, eta)).item() == pytest.approx(volume_penalty(c * z, c * eta).item(), rel=1e-12)


def test_volume_penalty_large_eta_limit_is_mean_std():
    """(Π(σ_i+η))^{1/m} = η·exp(mean log(1+σ_i/η)) = η + mean σ − Var_i(σ)/(2η) + O(η⁻²)."""
    z = latents(seed=7)
    sigma = z.std(0)
    for eta in (1e3, 1e4):
        gap = volume_penalty(z, eta) - eta - sigma.mean()
        expected = -sigma.var(unbiased=False) / (2 * eta)
        assert gap.item() == pytest.approx(expected.item(), rel=0.02)


def test_volume_penalty_gradient_closed_form():
    """∂L/∂σ_i = L/(m(σ_i+η)) and ∂σ_i/∂z_ni = (z_ni − z̄_i)/((n−1)σ_i)."""
    z = latents(n=9, m=4, seed=8).requires_grad_()
    eta = 1.0
    loss = volume_penalty(z, eta)
    (grad,) = torch.autograd.grad(loss, z)
    with torch.no_grad():
        n, m = z.shape
        sigma = z.std(0)
        d_sigma = loss / (m * (sigma + eta))
        expected = d_sigma * (z - z.mean(0)) / ((n - 1) * sigma)
    torch.testing.assert_close(grad, expected, rtol=1e-10, atol=1e-14)
    assert torch.autograd.gradcheck(lambda a: volume_penalty(a, 0.5), (latents(n=5, m=3, seed=9).requires_grad_(),))


def test_penalties_keep_dtype_and_reject_bad_input():
    for dtype in (torch.float32, torch.float64):
        z = latents(dtype=dtype)
        for fn in (volume_penalty, l1_std_penalty, lasso_penalty, student_t_penalty):
            assert fn(z).dtype == dtype
    with pytest.raises(ValueError, match="2-D"):
        volume_penalty(torch.zeros(3, 2, 2))
    with pytest.raises(ValueError, match="at least 2 rows"):
        volume_penalty(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="eta"):
        volume_penalty(latents(), eta=-0.1)


# ---------------------------------------------------------------- Lipschitz decoders

def conv_operator_norm(module, in_shape, kernel=None):
    """Top singular value of the bias-free layer's Jacobian at input shape (C_in, *in_shape)."""
    op = conv_linear_map(module)
    kernel = (module.weight if kernel is None else kernel).detach().double()
    x0 = torch.zeros(1, module.in_channels, *in_shape, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda x: op(x, kernel), x0).reshape(-1, x0.numel())
    return torch.linalg.matrix_norm(jac, 2).item()


@pytest.mark.parametrize("layer, in_shape", [
    (lambda: nn.ConvTranspose2d(4, 3, 4, 2, 1), (5, 5)),  # the paper's deconvolution
    (lambda: nn.Conv2d(3, 4, 3, 2, 1), (7, 6)),           # odd input: conv_transpose alone misses a row
    (lambda: nn.Conv1d(2, 3, 5, 1, 2, dilation=2), (11,)),
])
def test_spectral_norm_conv_matches_jacobian_top_singular_value(layer, in_shape):
    torch.manual_seed(0)
    module = layer().double()
    with torch.no_grad():
        module.weight.mul_(50.0)  # large raw weights
    true_sigma = conv_operator_norm(module, in_shape)
    spectral_norm_conv(module, in_shape)
    module.train()
    for _ in range(200):  # every training-mode access runs one power iteration
        module.weight
    raw = module.parametrizations.weight.original
    assert module.parametrizations.weight[0].sigma(raw).item() == pytest.approx(true_sigma, rel=1e-6)
    module.eval()
    assert conv_operator_norm(module, in_shape) == pytest.approx(1.0, rel=1e-6)
    # the kernel-matrix norm that torch's spectral_norm uses is another number: no bound on the layer
    matrix = raw.detach().flatten(1) if type(module) in (nn.Conv1d, nn.Conv2d) else raw.detach().transpose(0, 1).flatten(1)
    assert abs(torch.linalg.matrix_norm(matrix, 2).item() - true_sigma) / true_sigma > 0.05


def test_spectral_norm_conv_rejects_non_conv_and_string_padding():
    with pytest.raises(ValueError, match="Conv or ConvTranspose"):
        spectral_norm_conv(nn.Linear(3, 3), (4,))
    with pytest.raises(ValueError, match="padding"):
        spectral_norm_conv(nn.Conv2d(1, 1, 3, padding="same"), (5, 5))


def lipschitz_ratio(decode, m, seed, pairs=64, scale=3.0):
    g = gen(seed)
    a = torch.randn(pairs, m, generator=g, dtype=torch.float64) * scale
    b = a + torch.randn(pairs, m, generator=g, dtype=torch.float64) * torch.rand(pairs, 1, generator=g, dtype=torch.float64)
    with torch.no_grad():
        num = (decode(a) - decode(b)).flatten(1).norm(dim=1)
    return (num / (a - b).norm(dim=1)).max().item()


def jacobian_norm(decode, z):
    jac = torch.autograd.functional.jacobian(lambda v: decode(v.unsqueeze(0)).flatten(), z)
    return torch.linalg.matrix_norm(jac.reshape(-1, z.numel()), 2).item()


def inflate_and_settle(model, latent_dim, factor=1e3, forwards=300):
    """Scale every raw decoder weight by `factor`, then run training forwards until the power
    iterations have converged (the normalised weights do not depend on the scale)."""
    with torch.no_grad():
        for name, p in model.decoder.named_parameters():
            if name.endswith("weight") or name.endswith("original"):
                p.mul_(factor)
    model.train()
    probe = torch.zeros(2, latent_dim, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(forwards):
            model.decode(probe)
    model.eval()


@pytest.mark.parametrize("out_activation", [None, "sigmoid"])
def test_mlp_decoder_is_one_lipschitz_however_large_its_weights(out_activation):
    torch.manual_seed(0)
    model = LeastVolumeAE(12, 5, hidden=(16, 16), out_activation=out_activation).double()
    inflate_and_settle(model, 5)
    assert lipschitz_ratio(model.decode, 5, seed=1) <= 1 + 1e-6
    assert jacobian_norm(model.decode, torch.randn(5, generator=gen(2), dtype=torch.float64)) <= 1 + 1e-6
    free = LeastVolumeAE(12, 5, hidden=(16, 16), lipschitz=False, out_activation=out_activation).double()
    inflate_and_settle(free, 5, factor=10.0, forwards=1)
    assert lipschitz_ratio(free.decode, 5, seed=1) > 5  # the "nolip" ablation is not bounded


def test_conv_decoder_is_one_lipschitz():
    torch.manual_seed(0)
    model = ConvLeastVolumeAE(in_channels=1, latent_dim=6, size=8, encoder_channels=(4, 8),
                              decoder_channels=(8, 4), out_activation=None).double()
    inflate_and_settle(model, 6, forwards=200)
    z = torch.randn(6, generator=gen(3), dtype=torch.float64)
    norm = jacobian_norm(model.decode, z)
    assert 0.05 < norm <= 1 + 1e-6
    assert lipschitz_ratio(model.decode, 6, seed=4) <= 1 + 1e-6


def test_model_shapes_and_dtypes():
    model = LeastVolumeAE(64, 8, hidden=(32,))
    x_hat, z = model(torch.rand(5, 64))
    assert x_hat.shape == (5, 64) and z.shape == (5, 8) and 0 < x_hat.min() and x_hat.max() < 1
    conv = ConvLeastVolumeAE(in_channels=3, latent_dim=10, size=16, encoder_channels=(4, 8),
                             decoder_channels=(8, 4))
    x_hat, z = conv(torch.rand(2, 3, 16, 16))
    assert x_hat.shape == (2, 3, 16, 16) and z.shape == (2, 10)
    with pytest.raises(ValueError, match="out_activation"):
        LeastVolumeAE(4, 2, out_activation="tanh")


# ---------------------------------------------------------------- metrics on a linear autoencoder

def sq_loss(x_hat, x):
    return (x_hat - x).pow(2).flatten(1).sum(1).mean()


def pca_problem(seed=0, n=500, d=10, m=6):
    """Gaussian data with distinct variances in a random basis, and PCA's (encode, decode): a
    linear autoencoder whose decoder columns are orthonormal."""
    g = gen(seed)
    basis, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    scales = torch.tensor([4.0, 3.0, 2.0, 1.5, 1.0, 0.5, 0.2, 0.1, 0.05, 0.02], dtype=torch.float64)[:d]
    x = (torch.randn(n, d, generator=g, dtype=torch.float64) * scales) @ basis.T + 1.0
    encode, decode = pca_autoencoder(x, m)
    return x, encode, decode


def test_explained_reconstruction_is_explained_variance_ratio_for_pca():
    from sklearn.decomposition import PCA

    x, encode, decode = pca_problem()
    rho = explained_reconstruction(encode, decode, x, loss_fn=sq_loss)
    ev = PCA(n_components=6).fit(x.numpy()).explained_variance_
    np.testing.assert_allclose(rho.numpy(), ev / ev.sum(), rtol=1e-8)
    assert importance_correlation(encode, decode, x, loss_fn=sq_loss) > 0.9


def test_latent_dim_is_pca_count_and_curve_is_pca_residual():
    from sklearn.decomposition import PCA

    x, encode, decode = pca_problem(seed=1)
    ev = PCA(n_components=6).fit(x.numpy()).explained_variance_
    tail = ev.sum() - np.concatenate([[0.0], np.cumsum(ev)])  # variance left after keeping k = 0..6
    curve = pruning_curve(encode, decode, x, loss_fn=sq_loss)
    residual = curve[-1].item()
    np.testing.assert_allclose(curve.numpy() - residual, tail * (len(x) - 1) / len(x), rtol=1e-8, atol=1e-10)
    for tol in (0.01, 0.05, 0.2):
        expected = int(np.argmax(tail <= tol * ev.sum() + 1e-12))
        assert latent_dim(encode, decode, x, rel_tol=tol, loss_fn=sq_loss) == expected
    assert latent_dim(encode, decode, x, rel_tol=0.05, loss_fn=sq_loss) < 6


def test_pruned_loss_and_latents_and_chunking():
    x, encode, decode = pca_problem(seed=2)
    z = encode(x)
    kept = pruned_latents(z, 2)
    order = z.std(0).argsort(descending=True)
    torch.testing.assert_close(kept[:, order[:2]], z[:, order[:2]])
    torch.testing.assert_close(kept[:, order[2:]], z[:, order[2:]].mean(0).expand(len(z), -1))
    curve = pruning_curve(encode, decode, x)
    assert pruned_loss(encode, decode, x, 2) == pytest.approx(curve[2].item(), rel=1e-12)
    assert pruned_loss(encode, decode, x, 6) == pytest.approx(l2_loss(decode(z), x).item(), rel=1e-12)
    torch.testing.assert_close(pruning_curve(encode, decode, x, chunk=3), curve)
    torch.testing.assert_close(explained_reconstruction(encode, decode, x, chunk=4),
                               explained_reconstruction(encode, decode, x))
    with pytest.raises(ValueError, match="keep"):
        pruned_latents(z, 7)


def test_l2_loss_is_mean_euclidean_error():
    a, b = torch.rand(4, 2, 3, generator=gen(0)), torch.rand(4, 2, 3, generator=gen(1))
    expected = sum(math.sqrt(((a[i] - b[i]) ** 2).sum().item()) for i in range(4)) / 4
    assert l2_loss(a, b).item() == pytest.approx(expected, rel=1e-6)


# ---------------------------------------------------------------- training

def test_linear_least_volume_recovers_principal_directions_in_std_order():
    """LV on a linear AE with a spectrally normalised decoder is PCA (the paper's PCA theorem): the latent
    stds follow the data's principal stds and each kept decoder column is a principal direction;
    the two empty directions are compressed away."""
    from sklearn.decomposition import PCA

    torch.manual_seed(0)
    g = gen(0)
    basis, _ = torch.linalg.qr(torch.randn(5, 5, generator=g))
    x = (torch.randn(200, 5, generator=g) * torch.tensor([3.0, 1.5, 0.6, 0.0, 0.0])) @ basis.T
    pca = PCA(3).fit(x.numpy())
    model = LeastVolumeAE(5, 5, hidden=(), out_activation=None)
    fit_autoencoder(model, x, "volume", weight=0.2, reconstruction="mse", steps=600, batch_size=200,
                    lr=1e-2, seed=0, log_every=0)
    with torch.no_grad():
        std = model.encode(x).std(0)
        order = std.argsort(descending=True)
        columns = model.decoder[0].weight[:, order[:3]]  # (5, 3): decoder columns of the top-3 dims
    cosines = (F.normalize(columns, dim=0) * torch.from_numpy(pca.components_).float().T).sum(0).abs()
    assert cosines.min() > 0.97, cosines
    np.testing.assert_allclose(std[order[:3]].numpy(), np.sqrt(pca.explained_variance_), rtol=0.25)
    assert std[order[3:]].max() < 0.02


def test_fit_autoencoder_is_seeded_and_rejects_bad_arguments():
    x = torch.rand(64, 8, generator=gen(0))

    def run():
        torch.manual_seed(1)
        model = LeastVolumeAE(8, 3, hidden=(8,))
        rows = fit_autoencoder(model, x, steps=5, batch_size=16, seed=2, log_every=1)
        return rows[-1]["loss"]

    assert run() == run()
    with pytest.raises(ValueError, match="penalty"):
        fit_autoencoder(LeastVolumeAE(8, 3), x, penalty="volumes", steps=1)
    with pytest.raises(ValueError, match="batch_size"):
        fit_autoencoder(LeastVolumeAE(8, 3), x, batch_size=1, steps=1)


# ---------------------------------------------------------------- data

def test_digits_splits_are_the_sixteenths_of_sklearn_and_disjoint():
    from sklearn.datasets import load_digits

    splits = digits_splits()
    sizes = {k: len(v[0]) for k, v in splits.items()}
    assert sum(sizes.values()) == 1797 and sizes["test"] == 360
    raw = torch.from_numpy(load_digits().data / 16).float()
    rows = {tuple(r) for r in raw.numpy().round(6)}
    for x, _ in splits.values():
        assert x.min() >= 0 and x.max() <= 1
        assert all(tuple(r) in rows for r in x.numpy().round(6)[:50])  # exactly k/16, not k/255-rounded
    with pytest.raises(ValueError, match="val_share"):
        digits_splits(val_share=1.0)


def test_manifold_is_three_dimensional_and_fixed():
    splits = manifold_splits(n_train=300, n_val=10, n_test=10)
    x, u = splits["train"]
    assert x.shape == (300, 32) and u.shape == (300, 3) and 0 < x.min() and x.max() < 1
    torch.testing.assert_close(manifold_splits(n_train=300, n_val=10, n_test=10)["train"][0], x)
    # locally the map is rank 3: the data's local covariance has 3 non-negligible eigenvalues
    from methods.least_volume.data import manifold_map
    jac = torch.autograd.functional.jacobian(manifold_map(), torch.zeros(1, 3)).reshape(32, 3)
    sv = torch.linalg.svdvals(jac)
    assert sv.min() > 1e-2


def test_penalized_autoencoder_step_is_the_least_volume_loss():
    """What the shared Trainer minimises is J + λ·L_vol, the objective `fit_autoencoder` uses."""
    from methods.least_volume import PenalizedAutoencoder, least_volume_loss

    torch.manual_seed(0)
    ae = LeastVolumeAE(6, 3, hidden=(8,)).eval()   # eval: spectral norm's power iteration holds still
    x = torch.rand(10, 6)
    loss, logs = PenalizedAutoencoder(ae, "volume", weight=0.3, eta=2.0, reconstruction="bce").training_step(x)
    x_hat, z = ae(x)
    expected = least_volume_loss(x_hat, x, z, 0.3, lambda t: volume_penalty(t, 2.0))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert logs["penalty"].item() == pytest.approx(volume_penalty(z, 2.0).item(), rel=1e-6)
    plain, _ = PenalizedAutoencoder(ae, "volume", weight=0.0).training_step(x)
    assert plain.item() == pytest.approx(torch.nn.functional.binary_cross_entropy(x_hat, x).item(), rel=1e-6)


def test_run_config_builds_the_model_and_rejects_unknown_penalties(compose_cfg):
    from common.config import UserError
    from methods.least_volume import build, run

    cfg = compose_cfg(["experiment=least_volume_smoke"])
    model = build(cfg)
    assert isinstance(model, LeastVolumeAE)
    assert model(torch.rand(4, cfg.method.model.in_dim))[1].shape == (4, cfg.method.model.latent_dim)
    cfg.method.penalty = "volumes"
    with pytest.raises(UserError, match="method.penalty"):
        run(cfg, None)


def test_pixels_row_is_the_inputs_as_their_own_code(compose_cfg, tmp_path):
    """method.penalty=pixels: encode = decode = identity, nothing trained; rec is 0 and the k-NN
    accuracy is scikit-learn's 5-NN on the raw test pixels against the raw train pixels."""
    from sklearn.neighbors import KNeighborsClassifier

    from common.runner import run_method

    cfg = compose_cfg(["experiment=least_volume_smoke", "method.penalty=pixels", f"run_dir={tmp_path}",
                       "logger=none"])
    out = run_method(cfg)
    splits = digits_splits(cfg.method.val_share)
    (xtr, ytr), (xte, yte) = splits["train"], splits["test"]
    knn = KNeighborsClassifier(n_neighbors=5).fit(xtr.numpy(), ytr.numpy())
    assert out["knn_acc"] == pytest.approx(float((knn.predict(xte.numpy()) == yte.numpy()).mean()))
    assert out["rec"] == 0.0
    expected = pruned_loss(lambda x: x, lambda z: z, xte, 8)      # the 8 highest-variance pixels kept
    assert out["rec_at_8"] == pytest.approx(expected, rel=1e-6)
    assert "train_loss" not in out


def test_sweep_stage_equals_the_single_run_and_draws_the_trade_off(compose_cfg, tmp_path):
    """Each penalty x λ of `method.sweep` starts from the initialisation and batch order of a
    single run of the same seed, so its numbers are that run's; the figure is written."""
    from common.config import UserError
    from common.runner import run_method

    base = ["experiment=least_volume_smoke", "logger=none", "seed=3"]
    sweep = run_method(compose_cfg(base + [f"run_dir={tmp_path / 'sweep'}",
                                           "method.sweep={penalties: {vol: volume, st: student_t}, "
                                           "weights: [0.01, 0.03]}"]))
    single = run_method(compose_cfg(base + [f"run_dir={tmp_path / 'single'}", "method.penalty=student_t",
                                            "method.weight=0.03"]))
    assert {k.split("/")[0] for k in sweep} == {"vol_1e-2", "vol_3e-2", "st_1e-2", "st_3e-2"}
    assert {k: sweep[f"st_3e-2/{k}"] for k in single} == single
    assert sweep["vol_1e-2/rec"] != sweep["vol_3e-2/rec"]
    assert (tmp_path / "sweep" / "trade_off.png").stat().st_size > 0
    from methods.least_volume import run

    bad = compose_cfg(base + ["method.sweep={penalties: {p: pca}, weights: [0.01]}"])
    with pytest.raises(UserError, match="method.sweep"):
        run(bad, None)
