"""Least Volume's latent penalties and the reconstruction terms (Chen & Fuge, ICLR 2024,
"Least Volume: Compressing the Latent Space of an Autoencoder"), pure functions of tensors.

z is always the latent batch (n, m). σ_i is the unbiased std of column i over the batch, as
the official `z.std(0)` (src/model/sparsity.py). Every function keeps z's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _check_latents(z: torch.Tensor, needs_std: bool = True) -> None:
    if z.dim() != 2:
        raise ValueError(f"z must be a 2-D latent batch (n, m), got shape {tuple(z.shape)}.")
    if needs_std and z.shape[0] < 2:
        raise ValueError(f"z needs at least 2 rows for a per-dimension std, got {z.shape[0]}.")


def volume_penalty(z: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """L_vol = (Π_i (σ_i + η))^{1/m} = exp(mean_i log(σ_i + η)) (paper §2.1, the volume penalty
    as a geometric mean with offset η; official `VolumeAE.loss_spar`). η > 0 keeps log finite when a σ_i reaches 0;
    as η → ∞, L_vol − η → mean σ, an L1 penalty on the stds."""
    _check_latents(z)
    if eta < 0:
        raise ValueError(f"eta must be >= 0, got {eta}.")
    return torch.exp(torch.log(z.std(0) + eta).mean())


def l1_std_penalty(z: torch.Tensor) -> torch.Tensor:
    """‖σ‖₁ / m, the L1 baseline on the per-dimension stds (official `L1AE.loss_spar`)."""
    _check_latents(z)
    return z.std(0).norm(p=1) / z.shape[1]


def lasso_penalty(z: torch.Tensor) -> torch.Tensor:
    """mean |z_ni|, the Lasso baseline on the latent codes (official `LassoAE.loss_spar`)."""
    _check_latents(z, needs_std=False)
    return z.abs().mean()


def student_t_penalty(z: torch.Tensor) -> torch.Tensor:
    """mean log(1 + z_ni²), the Student's-t sparsity baseline (official `STAE.loss_spar`)."""
    _check_latents(z, needs_std=False)
    return torch.log1p(z.pow(2)).mean()


def bce_reconstruction(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """J = mean over all entries of BCE(x̂, x), x̂ a sigmoid output in (0, 1) (the paper's image
    loss; official `BCEAutoencoder.loss_rec`). Computed in float32 with autocast off: CUDA
    autocast refuses F.binary_cross_entropy on probabilities (bf16 cannot hold log(1 − x̂) near
    x̂ = 1), so under hardware=cuda (bf16) the inputs are upcast here; the result has x̂'s dtype."""
    with torch.autocast(x_hat.device.type, enabled=False):
        return F.binary_cross_entropy(x_hat.float(), x.float()).to(x_hat.dtype)


def mse_reconstruction(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """J = mean over all entries of (x̂ − x)² (official `AutoEncoder.loss_rec`)."""
    return F.mse_loss(x_hat, x)


def least_volume_loss(x_hat: torch.Tensor, x: torch.Tensor, z: torch.Tensor, weight: float,
                      penalty=volume_penalty, reconstruction=bce_reconstruction) -> torch.Tensor:
    """J(x, g(e(x))) + λ · P(z) (paper §2.1's objective with P = L_vol; the baselines swap P;
    official `_SparseAE.loss` weighted by [1, λ])."""
    total = reconstruction(x_hat, x)
    if weight:
        total = total + weight * penalty(z)
    return total


PENALTIES = {"volume": volume_penalty, "l1": l1_std_penalty, "lasso": lasso_penalty,
             "student_t": student_t_penalty}
RECONSTRUCTIONS = {"bce": bce_reconstruction, "mse": mse_reconstruction}
