"""The training objective and the evaluation errors (paper section 3, following Garg et al. 2022)."""
from __future__ import annotations

import torch


def prompt_loss(predictions: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """The training loss: mean over prompts and positions i of (ŷ_i − y_i)², predictions and ys (B, k)."""
    return (predictions - ys).square().mean()


def normalized_sq_error(predictions: torch.Tensor, targets: torch.Tensor, dim: int) -> torch.Tensor:
    """E_b (ŷ_bi − t_bi)² / d at every position i: (k,). With t = y it is the nmse curve (the
    zero predictor scores about 1 + σ²/d); with t = another procedure's ŷ it is the distance
    between two procedures on the same prompts (the paper's probing)."""
    return (predictions - targets).square().mean(0) / dim
