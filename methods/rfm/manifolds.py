"""The simple geometries of Riemannian Flow Matching: the sphere S² and the flat torus T^D.

Both use the Euclidean metric of their coordinates (the sphere's ambient R³, the torus'
angles), so ‖u‖_g is the plain norm of the tangent vector's coordinates.
"""
from __future__ import annotations

import math

import torch


class Sphere:
    """S² ⊂ R³ with great-circle geodesics. Points are unit vectors (..., 3)."""

    dim = 2
    ambient_dim = feature_dim = 3
    log_volume = math.log(4 * math.pi)

    def projx(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True)

    def proju(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Remove the normal component: u − ⟨x, u⟩ x (x need not be unit)."""
        x = self.projx(x)
        return u - (x * u).sum(-1, keepdim=True) * x

    def to_tangent(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The tangent part of a model's ambient output (the projection)."""
        return self.proju(x, u)

    def exp(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        norm = u.norm(dim=-1, keepdim=True)
        safe = norm.clamp_min(1e-12)
        return self.projx(torch.cos(norm) * x + torch.sin(norm) * u / safe)

    def log(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The tangent vector at x pointing to y with length d(x, y)."""
        v = self.proju(x, y - x)
        dist = self.dist(x, y).unsqueeze(-1)
        return v * dist / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def dist(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # atan2 of |x × y| and x·y is accurate for near and antipodal points (arccos is not)
        return torch.atan2(torch.linalg.cross(x, y).norm(dim=-1), (x * y).sum(-1))

    def random_uniform(self, n: int, dtype=torch.float64, generator=None) -> torch.Tensor:
        return self.projx(torch.randn(n, 3, dtype=dtype, generator=generator))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Model inputs: the ambient coordinates."""
        return x


class FlatTorus:
    """T^D = [0, 2π)^D with the flat metric. Points are angle vectors (..., D)."""

    def __init__(self, dim: int):
        self.dim = self.ambient_dim = dim
        self.feature_dim = 2 * dim
        self.log_volume = dim * math.log(2 * math.pi)

    def projx(self, x: torch.Tensor) -> torch.Tensor:
        return torch.remainder(x, 2 * math.pi)

    def proju(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return u

    def to_tangent(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return u

    def exp(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return self.projx(x + u)

    def log(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        d = y - x
        return torch.atan2(torch.sin(d), torch.cos(d))

    def dist(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.log(x, y).norm(dim=-1)

    def random_uniform(self, n: int, dtype=torch.float64, generator=None) -> torch.Tensor:
        return 2 * math.pi * torch.rand(n, self.dim, dtype=dtype, generator=generator)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Model inputs: (cos, sin) of every angle, so the field is continuous across 0 = 2π."""
        return torch.cat([torch.cos(x), torch.sin(x)], dim=-1)
