"""Target densities on a mesh from a Laplace-Beltrami eigenfunction (RFM section 6, the bunny and
spot data "from the k-th eigenfunction"; the official repository ships those samples as .npy
files, so the construction here is our reading, stated in the README):

    p(x) ∝ max(φ_k, 0), interpolated linearly inside each face from the clamped vertex values,

with φ_k the k-th eigenfunction of L φ = λ M φ counting the constant one as the first (k = 10 is
the official `bunny_eigfn009`). Sampled exactly, and its log-density known, so the table can show
the NLL of the target itself beside the flow's.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from methods.rfm.mesh import eigenpairs


class EigenfunctionDensity:
    """p ∝ max(φ_k, 0) on the mesh (verts (V, 3), faces (F, 3)); φ_k's sign is fixed so that its
    largest-magnitude vertex value is positive. Raises when λ_k is not simple (φ_k would then be
    an arbitrary member of its eigenspace)."""

    def __init__(self, verts: np.ndarray, faces: np.ndarray, k: int = 10):
        if k < 2:
            raise ValueError(f"k must be >= 2 (k = 1 is the constant eigenfunction), got {k}")
        vals, vecs = eigenpairs(verts, faces, k + 1)
        gap = min(vals[k - 1] - vals[k - 2], vals[k] - vals[k - 1])
        if gap < 1e-3 * vals[k - 1]:
            raise ValueError(f"eigenvalue {k} of this mesh ({vals[k - 1]:.5g}) is not simple (neighbours "
                             f"{vals[k - 2]:.5g}, {vals[k]:.5g}): choose another k or break the symmetry")
        phi = vecs[:, k - 1]
        phi = phi * np.sign(phi[np.argmax(np.abs(phi))])
        self.verts, self.faces = np.asarray(verts, np.float64), np.asarray(faces)
        self.values = np.maximum(phi, 0.0)                                  # (V,) clamped vertex values
        a, b, c = (self.verts[self.faces[:, i]] for i in range(3))
        area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
        self.face_mass = area * self.values[self.faces].mean(1)            # ∫ over each face
        self.log_normaliser = math.log(self.face_mass.sum())

    def sample(self, n: int, seed: int) -> torch.Tensor:
        """n exact samples (n, 3): a face by its mass, then a corner i by its value, then barycentric
        coordinates from Dirichlet(1 + e_i) (density ∝ b_i), whose mixture is ∝ Σ_i c_i b_i."""
        rng = np.random.default_rng(seed)
        face = rng.choice(len(self.faces), size=n, p=self.face_mass / self.face_mass.sum())
        corner_values = self.values[self.faces[face]]                      # (n, 3)
        u = rng.random(n)[:, None]
        corner = (u > np.cumsum(corner_values, 1) / corner_values.sum(1, keepdims=True)).sum(1)
        # Dirichlet(1 + e_i) as Dirichlet(1, 1, 1) with a Gamma(2) in place of the Gamma(1) at i
        gammas = -np.log(rng.random((n, 3)))
        gammas[np.arange(n), corner] += -np.log(rng.random(n))
        bary = gammas / gammas.sum(1, keepdims=True)
        points = np.einsum("nj,njc->nc", bary, self.verts[self.faces[face]])
        return torch.from_numpy(points)

    def log_prob(self, bary: torch.Tensor, face: torch.Tensor) -> torch.Tensor:
        """log p at points given by (face (N,), barycentric coordinates (N, 3)), e.g. Mesh.locate's."""
        values = torch.from_numpy(self.values)[torch.from_numpy(self.faces)[face]]
        return torch.log((bary * values).sum(-1)) - self.log_normaliser

