"""ZCA whitening as MTT applies it (kornia `ZCAWhitening(eps=0.1)`, fitted on the training images)."""
from __future__ import annotations

import torch


class ZCA:
    """fit(x): mu, Sigma = X_c^T X_c / (N - 1) = U S U^T, W = U diag((S + eps)^-1/2) U^T;
    transform(x) = (x - mu) W in x's shape; inverse(z) = z W^-1 + mu."""

    def __init__(self):
        self.mean = self.w = self.w_inv = None

    def fit(self, x: torch.Tensor, eps: float = 0.1) -> "ZCA":
        if eps < 0:
            raise ValueError(f"ZCA eps must be >= 0, got {eps}")
        if len(x) < 2:
            raise ValueError(f"ZCA needs at least 2 samples to estimate a covariance, got {len(x)}")
        flat = x.reshape(len(x), -1).double()
        self.mean = flat.mean(0)
        xc = flat - self.mean
        cov = xc.T @ xc / (len(x) - 1)
        s, u = torch.linalg.eigh(cov)
        s = s.clamp_min(0.0)
        self.w = (u * (s + eps).rsqrt()) @ u.T
        self.w_inv = (u * (s + eps).sqrt()) @ u.T
        return self

    def _check(self, x: torch.Tensor):
        if self.w is None:
            raise ValueError("ZCA is not fitted: call fit(x) first")
        if x[0].numel() != len(self.mean):
            raise ValueError(f"ZCA was fitted on {len(self.mean)} features, got samples of {x[0].numel()}")

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x)
        z = (x.reshape(len(x), -1).double() - self.mean) @ self.w
        return z.reshape(x.shape).to(x.dtype)

    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        self._check(z)
        x = z.reshape(len(z), -1).double() @ self.w_inv + self.mean
        return x.reshape(z.shape).to(z.dtype)
