"""Least Volume: compressing the latent space of an autoencoder (Chen & Fuge, ICLR 2024). See README.md."""
from __future__ import annotations

from methods.least_volume.data import digits_splits, manifold_map, manifold_samples, manifold_splits
from methods.least_volume.lipschitz import SpectralNormConv, spectral_norm_conv
from methods.least_volume.loss import (bce_reconstruction, l1_std_penalty, lasso_penalty, least_volume_loss,
                                       mse_reconstruction, student_t_penalty, volume_penalty)
from methods.least_volume.metrics import (explained_reconstruction, importance_correlation, knn_accuracy, l2_loss,
                                          latent_dim, pruned_latents, pruned_loss, pruning_curve)
from methods.least_volume.model import Autoencoder, ConvDecoder, ConvEncoder, ConvLeastVolumeAE, LeastVolumeAE
from methods.least_volume.train import evaluate, fit_autoencoder, pca_autoencoder

__all__ = ["Autoencoder", "ConvDecoder", "ConvEncoder", "ConvLeastVolumeAE", "LeastVolumeAE", "SpectralNormConv",
           "bce_reconstruction", "digits_splits", "evaluate", "explained_reconstruction", "fit_autoencoder",
           "importance_correlation", "knn_accuracy", "l1_std_penalty", "l2_loss", "lasso_penalty", "latent_dim",
           "least_volume_loss", "manifold_map", "manifold_samples", "manifold_splits", "mse_reconstruction",
           "pca_autoencoder", "pruned_latents", "pruned_loss", "pruning_curve", "spectral_norm_conv",
           "student_t_penalty", "volume_penalty"]
