"""Naive stand-ins for the transformer's claims (issue #49, cold read): learners that use the prompt
nonlinearly but not through Φ*. `RandomReluFeatures`: ridge on random ReLU features of x, a learner
agnostic of Φ* (a kernel-like regression on the prompt); a wrong Φ': the Bayes rule of another
random MLP of the same architecture (another seed's Φ*), i.e. ridge on Φ'(x) with λ = σ²D."""
from __future__ import annotations

import math

import torch


class RandomReluFeatures:
    """f(x) = [max(0, xG + c) / √m, 1] (..., m + 1): G ∈ R^{d×m} with N(0, 1/d) entries, c ∈ R^m with
    N(0, 1) entries, drawn once from `seed` (in that order, float64); the constant column is the
    intercept, penalised like the rest by the ridge that reads these features."""

    def __init__(self, dim: int, num_features: int, seed: int = 0):
        if dim < 1 or num_features < 1:
            raise ValueError(f"dim and num_features must be >= 1, got dim={dim}, num_features={num_features}")
        self.dim, self.num_features = int(dim), int(num_features)
        gen = torch.Generator().manual_seed(int(seed))
        self.weight = torch.randn(self.dim, self.num_features, generator=gen, dtype=torch.float64) / math.sqrt(self.dim)
        self.bias = torch.randn(self.num_features, generator=gen, dtype=torch.float64)

    def features(self, xs: torch.Tensor) -> torch.Tensor:
        """f(x) for x (..., d): (..., m + 1) in float64."""
        if xs.shape[-1] != self.dim:
            raise ValueError(f"the random features read x of width {self.dim}, got width {xs.shape[-1]}")
        h = torch.relu(xs.double() @ self.weight + self.bias) / math.sqrt(self.num_features)
        return torch.cat([h, h.new_ones(*h.shape[:-1], 1)], dim=-1)

    __call__ = features


__all__ = ["RandomReluFeatures"]
