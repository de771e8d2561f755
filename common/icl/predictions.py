"""In-context predictions and errors shared by the in-context packages: the training loss, the
per-position error, least squares and ridge on every prefix, the model's predictions in eval
mode (moved unchanged from methods/mixreg_transformer, issue #49; `ridge_predictions` is new)."""
from __future__ import annotations

import torch

from common.icl.prompts import check_prompts


def prompt_loss(predictions: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """The training loss: mean over prompts and positions i of (ŷ_i − y_i)², predictions and ys (B, k)."""
    return (predictions - ys).square().mean()


def normalized_sq_error(predictions: torch.Tensor, targets: torch.Tensor, dim: int) -> torch.Tensor:
    """E_b (ŷ_bi − t_bi)² / d at every position i: (k,). With t = y it is the nmse curve (the
    zero predictor scores about 1 + σ²/d); with t = another procedure's ŷ it is the distance
    between two procedures on the same prompts (the paper's probing)."""
    return (predictions - targets).square().mean(0) / dim


def ols_predictions(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """ŷ_i = ⟨ŵ_i, x_i⟩ with ŵ_i the minimum-norm least-squares fit to the prefix (the
    pseudo-inverse, so under-determined prefixes i < d are fine); 0 at i = 0: (B, k).
    Solved in float64: near i ≈ d the prefix is ill-conditioned."""
    check_prompts(xs, ys)
    x, y = xs.double(), ys.double()
    out = torch.zeros_like(y)
    for i in range(1, x.shape[1]):
        w = torch.linalg.pinv(x[:, :i]) @ y[:, :i, None]          # (B, d, 1)
        out[:, i] = (x[:, i, None, :] @ w)[:, 0, 0]
    return out.to(ys.dtype)


def ridge_predictions(features: torch.Tensor, ys: torch.Tensor, lam: float) -> torch.Tensor:
    """ŷ_i = ⟨f_i, (F_<iᵀF_<i + λI)⁻¹F_<iᵀy_<i⟩ on the prefix t < i, 0 at i = 0: (B, k), from
    features (B, k, D) and ys (B, k). λ = 0 is minimum-norm least squares (`ols_predictions`).
    Solved in float64 and returned in ys's dtype."""
    check_prompts(features, ys)
    if not lam >= 0:
        raise ValueError(f"the ridge penalty lam must be >= 0, got {lam}")
    if lam == 0:
        return ols_predictions(features, ys)
    f, y = features.double(), ys.double()
    eye = torch.eye(f.shape[-1], dtype=f.dtype)
    out = torch.zeros_like(y)
    for i in range(1, f.shape[1]):
        prefix = f[:, :i]                                           # (B, i, D)
        gram = prefix.transpose(1, 2) @ prefix + float(lam) * eye   # (B, D, D), positive definite
        w = torch.linalg.solve(gram, prefix.transpose(1, 2) @ y[:, :i, None])
        out[:, i] = (f[:, i, None, :] @ w)[:, 0, 0]
    return out.to(ys.dtype)


@torch.no_grad()
def transformer_predictions(model: torch.nn.Module, xs: torch.Tensor, ys: torch.Tensor, chunk: int = 1000) -> torch.Tensor:
    """The model's predictions (B, k) in eval mode, `chunk` prompts per forward pass."""
    model.eval()
    device = next(model.parameters()).device
    return torch.cat([model(xs[i:i + chunk].to(device), ys[i:i + chunk].to(device)).cpu()
                      for i in range(0, len(xs), chunk)])
