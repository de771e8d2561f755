"""Densities the RFM table is measured against: uniform, and a mixture of von Mises-Fisher
distributions on S² fit by EM (Banerjee et al. 2005)."""
from __future__ import annotations

import math

import torch


def log_vmf_normaliser(kappa: torch.Tensor) -> torch.Tensor:
    """log C(κ) on S²: C = κ / (4π sinh κ), written stably as log κ − log 2π − κ − log(1 − e^{−2κ})."""
    kappa = kappa.clamp_min(1e-6)
    return kappa.log() - math.log(2 * math.pi) - kappa - torch.log1p(-torch.exp(-2 * kappa))


class VMFMixture:
    """p(x) = Σ_k π_k C(κ_k) exp(κ_k μ_kᵀ x) on S²."""

    def __init__(self, components: int, iters: int = 200, seed: int = 0):
        self.k, self.iters, self.seed = components, iters, seed

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        comp = self.log_weights + log_vmf_normaliser(self.kappa) + self.kappa * (x @ self.mu.T)
        return torch.logsumexp(comp, dim=-1)

    def fit(self, x: torch.Tensor) -> "VMFMixture":
        gen = torch.Generator().manual_seed(self.seed)
        self.mu = x[torch.randperm(len(x), generator=gen)[: self.k]].clone()
        self.kappa = torch.full((self.k,), 10.0, dtype=x.dtype)
        self.log_weights = torch.full((self.k,), -math.log(self.k), dtype=x.dtype)
        for _ in range(self.iters):
            comp = self.log_weights + log_vmf_normaliser(self.kappa) + self.kappa * (x @ self.mu.T)
            resp = torch.softmax(comp, dim=-1)                         # E step (N, K)
            nk = resp.sum(0).clamp_min(1e-10)
            s = resp.T @ x                                             # (K, 3)
            r = s.norm(dim=-1).clamp_min(1e-10)
            self.mu = s / r[:, None]
            rbar = (r / nk).clamp(1e-6, 1 - 1e-6)
            self.kappa = (rbar * 3 - rbar ** 3) / (1 - rbar ** 2)       # Banerjee's approximation, p = 3
            self.log_weights = (nk / nk.sum()).log()
        return self
