"""KRR-ST's outer objective (Lee et al., ICLR 2024, Eq. 4-5; official `algorithms/distill.py`)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from common.distill import append_bias, krr_predict


def krr_outer_loss(embed: Callable[[torch.Tensor], torch.Tensor], x_syn: torch.Tensor, y_syn: torch.Tensor,
                   x_real: torch.Tensor, y_real: torch.Tensor, rel_ridge: float = 1e-6) -> torch.Tensor:
    """Eq. 5: L = mean((K_ts (K_ss + lambda I)^-1 Y_s - Y_t)^2) over all n*d entries, with
    F_s = [embed(X_s), 1] (m, h+1), F_t = [embed(x_t), 1] (n, h+1) computed without grad,
    K = F F^T and lambda = rel_ridge * tr(K_ss) (detached). Differentiable in X_s and Y_s only.
    y_syn (m, d), y_real (n, d): the target encoder's representations g(x) (or labels)."""
    if rel_ridge < 0:
        raise ValueError(f"rel_ridge must be >= 0, got {rel_ridge}")
    if y_syn.dim() != 2 or y_real.dim() != 2 or y_syn.shape[1] != y_real.shape[1]:
        raise ValueError(f"y_syn and y_real must be (m, d) and (n, d) with one d, got {tuple(y_syn.shape)} "
                         f"and {tuple(y_real.shape)}")
    if len(x_syn) != len(y_syn) or len(x_real) != len(y_real):
        raise ValueError(f"images and targets differ in length: {len(x_syn)} vs {len(y_syn)} (synthetic), "
                         f"{len(x_real)} vs {len(y_real)} (real)")
    f_syn = append_bias(embed(x_syn))                       # (m, h + 1)
    with torch.no_grad():
        f_real = append_bias(embed(x_real))                 # (n, h + 1)
    pred = krr_predict(f_real, f_syn, y_syn, rel_ridge)     # (n, d)
    return F.mse_loss(pred, y_real.detach())
