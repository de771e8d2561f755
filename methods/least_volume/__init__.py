"""Least Volume: compressing the latent space of an autoencoder (Chen & Fuge, ICLR 2024). See README.md."""
from __future__ import annotations

import torch
from hydra.utils import instantiate

from common import tasks
from common.config import UserError
from methods.least_volume.data import digits_splits, manifold_map, manifold_samples, manifold_splits
from methods.least_volume.lipschitz import SpectralNormConv, spectral_norm_conv
from methods.least_volume.loss import (bce_reconstruction, l1_std_penalty, lasso_penalty, least_volume_loss,
                                       mse_reconstruction, student_t_penalty, volume_penalty)
from methods.least_volume.metrics import (explained_reconstruction, importance_correlation, knn_accuracy, l2_loss,
                                          latent_dim, pruned_latents, pruned_loss, pruning_curve)
from methods.least_volume.model import Autoencoder, ConvDecoder, ConvEncoder, ConvLeastVolumeAE, LeastVolumeAE
from methods.least_volume.train import PenalizedAutoencoder, evaluate, fit_autoencoder, pca_autoencoder

PENALTY_ROWS = ("volume", "l1", "lasso", "student_t", "none", "pca")


def build(cfg) -> Autoencoder:
    """The autoencoder of `method.model` from the config alone."""
    return instantiate(cfg.method.model)


def splits(cfg) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{'train', 'val', 'test'}: (x (n, D), labels or the manifold's coordinates u)."""
    d, m = cfg.dataset, cfg.method
    if d.name == "digits":
        return digits_splits(m.val_share, d.root)
    if d.name == "manifold":
        return manifold_splits(d.n_train, d.n_val, d.n_test, d.intrinsic_dim, d.ambient_dim, d.map_seed)
    raise UserError(f"least_volume runs on dataset digits or manifold, got '{d.name}'", exit_code=2)


def run(cfg, ctx) -> dict[str, float]:
    """Train the autoencoder on J + λ·P (method.penalty: volume | l1 | lasso | student_t | none)
    with the shared Trainer, or fit PCA (method.penalty = pca, no training); then on `eval.split`
    (test, or val for tuning): rec (L2), rec_at_<k>, latent_dim@δ, corr(σ, ρ), the sorted latent
    stds, and the k-NN accuracy on z where the data has labels."""
    m, ev = cfg.method, cfg.eval
    if m.penalty not in PENALTY_ROWS:
        raise UserError(f"method.penalty must be one of {', '.join(PENALTY_ROWS)}, got '{m.penalty}'", exit_code=2)
    data = splits(cfg)
    x_train, y_train = data["train"]
    x_eval, y_eval = data[ev.split]
    if x_train.shape[1] != m.model.in_dim:
        raise UserError(f"method.model.in_dim is {m.model.in_dim} but {cfg.dataset.name} has "
                        f"{x_train.shape[1]} features", exit_code=2)
    labelled = cfg.dataset.name == "digits"
    knn = dict(knn_train=(x_train, y_train), y=y_eval, neighbours=ev.k) if labelled else {}
    scores = dict(keep=tuple(ev.keep), rel_tol=ev.rel_tol, loss_fn=l2_loss, **knn)
    if m.penalty == "pca":
        encode, decode = pca_autoencoder(x_train, m.model.latent_dim)
        return evaluate(encode, decode, x_eval, **scores)
    model = PenalizedAutoencoder(build(cfg), m.penalty, m.weight, m.eta, m.reconstruction).to(ctx.device)
    x_dev, sampler = x_train.to(ctx.device), ctx.sampler(len(x_train))

    def metrics(trained):
        ae = trained.autoencoder.cpu()
        return evaluate(ae.encode, ae.decode, x_eval, **scores)
    return tasks.fit_and_evaluate(ctx, model, lambda step: x_dev[sampler(step)], metrics)


__all__ = ["Autoencoder", "ConvDecoder", "ConvEncoder", "ConvLeastVolumeAE", "LeastVolumeAE", "PENALTY_ROWS",
           "PenalizedAutoencoder", "SpectralNormConv", "bce_reconstruction", "build", "digits_splits", "evaluate",
           "explained_reconstruction", "fit_autoencoder", "importance_correlation", "knn_accuracy", "l1_std_penalty",
           "l2_loss", "lasso_penalty", "latent_dim", "least_volume_loss", "manifold_map", "manifold_samples",
           "manifold_splits", "mse_reconstruction", "pca_autoencoder", "pruned_latents", "pruned_loss",
           "pruning_curve", "run", "spectral_norm_conv", "splits", "student_t_penalty", "volume_penalty"]
