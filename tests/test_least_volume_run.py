"""Least Volume: the pruning/importance metrics on a linear (PCA) autoencoder, PCA recovery by LV
training, the data splits and the run (pixels row, λ sweep)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methods.least_volume import (LeastVolumeAE, digits_splits, explained_reconstruction, fit_autoencoder,
                                  importance_correlation, l2_loss, latent_dim, manifold_splits,
                                  pca_autoencoder, pruned_latents, pruned_loss, pruning_curve, volume_penalty)


def gen(seed):
    return torch.Generator().manual_seed(seed)


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
