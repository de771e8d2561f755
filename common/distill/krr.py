"""Kernel ridge regression on features (KRR-ST's inner solver): linear kernel K = F F^T."""
from __future__ import annotations

import torch


def _check_2d(name: str, f: torch.Tensor):
    if f.dim() != 2:
        raise ValueError(f"{name} must be 2-D (n, d) features, got shape {tuple(f.shape)}")


def append_bias(f: torch.Tensor) -> torch.Tensor:
    """(n, d) -> (n, d + 1): a column of ones appended."""
    _check_2d("features", f)
    return torch.cat([f, torch.ones(len(f), 1, dtype=f.dtype, device=f.device)], dim=1)


def krr_predict(f_query: torch.Tensor, f_support: torch.Tensor, y_support: torch.Tensor,
                rel_ridge: float = 1e-6) -> torch.Tensor:
    """K_qs (K_ss + lambda I)^-1 Y_s with K = F F^T and lambda = rel_ridge * tr(K_ss), detached."""
    _check_2d("f_query", f_query)
    _check_2d("f_support", f_support)
    if f_query.shape[1] != f_support.shape[1]:
        raise ValueError(f"query and support features differ in width: {f_query.shape[1]} vs {f_support.shape[1]}")
    if len(y_support) != len(f_support):
        raise ValueError(f"support features and targets differ in length: {len(f_support)} vs {len(y_support)}")
    if rel_ridge < 0:
        raise ValueError(f"rel_ridge must be >= 0, got {rel_ridge}")
    y = y_support if y_support.dim() == 2 else y_support.unsqueeze(1)
    k_ss = f_support @ f_support.T
    lam = rel_ridge * torch.trace(k_ss).detach()
    eye = torch.eye(len(k_ss), dtype=k_ss.dtype, device=k_ss.device)
    alpha = torch.linalg.solve(k_ss + lam * eye, y)
    out = (f_query @ f_support.T) @ alpha
    return out if y_support.dim() == 2 else out.squeeze(1)
