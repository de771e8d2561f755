"""Least Volume: the penalties against independent derivations and the Lipschitz decoders."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from methods.least_volume import (ConvLeastVolumeAE, LeastVolumeAE, l1_std_penalty, lasso_penalty,
                                  spectral_norm_conv, student_t_penalty, volume_penalty)
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
