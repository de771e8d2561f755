"""Transformers learn regression mixtures in context, near Bayes-optimal (Pathak et al., ICLR 2024). See README.md."""
from __future__ import annotations

from methods.mixreg_transformer.em import batch_em, em_step
from methods.mixreg_transformer.loss import normalized_sq_error, prompt_loss
from methods.mixreg_transformer.mixture import MixtureOfRegressions
from methods.mixreg_transformer.model import MixRegTransformer, interleave
from methods.mixreg_transformer.procedures import (argmin_predictions, component_weights, ols_predictions,
                                                   posterior_mean_predictions, posterior_weights,
                                                   prefix_sq_residuals)

__all__ = ["MixtureOfRegressions", "posterior_weights", "posterior_mean_predictions", "argmin_predictions",
           "ols_predictions", "batch_em", "MixRegTransformer", "component_weights", "prefix_sq_residuals",
           "em_step", "interleave", "prompt_loss", "normalized_sq_error"]
