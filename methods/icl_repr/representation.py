"""The generative process (Guo et al., ICLR 2024, §2-3): a fixed random MLP Φ* shared by every
prompt, a linear head w drawn afresh per prompt, y = ⟨w, Φ*(x)⟩ + σε."""
from __future__ import annotations

import math

import torch

from common.icl.prompts import check_prompts


def check_noise_std(noise_std: float) -> None:
    if not noise_std >= 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")


def haar_matrix(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """A (rows, cols) float64 matrix with orthonormal columns (rows >= cols) or orthonormal rows
    (rows < cols), Haar-distributed: Q of the QR decomposition of a Gaussian matrix, each column of Q
    multiplied by the sign of R's diagonal (Mezzadri 2007), so the law does not depend on the QR routine."""
    tall = rows >= cols
    g = torch.randn(max(rows, cols), min(rows, cols), generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(g)                      # q (max, min), orthonormal columns
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    return q if tall else q.T


class RandomRepresentation:
    """Φ*(x) = h_L, h_0 = x, h_ℓ = act(g · W_ℓ h_{ℓ−1}), act(t) = max(t, leak · t),
    g = √(2 / (1 + leak²)) (so a unit Gaussian pre-activation keeps E h² = 1 through act),
    W_1 ∈ R^{D×d}, W_ℓ ∈ R^{D×D} (ℓ ≥ 2), Haar with orthonormal columns (rows when D < d), drawn
    once from `seed`. `.weights`: the float64 matrices W_1..W_L."""

    def __init__(self, dim: int, rep_dim: int, depth: int = 2, leak: float = 0.01, seed: int = 0):
        if dim < 1 or rep_dim < 1 or depth < 1:
            raise ValueError(f"dim, rep_dim and depth must be >= 1, got dim={dim}, rep_dim={rep_dim}, depth={depth}")
        if not 0 <= leak < 1:
            raise ValueError(f"leak must lie in [0, 1), got {leak}")
        self.dim, self.rep_dim, self.depth, self.leak = int(dim), int(rep_dim), int(depth), float(leak)
        self.gain = math.sqrt(2.0 / (1.0 + self.leak ** 2))
        gen = torch.Generator().manual_seed(int(seed))
        self.weights = [haar_matrix(self.rep_dim, self.dim if layer == 0 else self.rep_dim, gen)
                        for layer in range(self.depth)]

    def rep(self, xs: torch.Tensor) -> torch.Tensor:
        """Φ*(x) for x (..., d): (..., D) in xs's dtype (computed in float64)."""
        if xs.shape[-1] != self.dim:
            raise ValueError(f"the representation reads x of width {self.dim}, got width {xs.shape[-1]}")
        h = xs.double()
        for w in self.weights:
            pre = self.gain * (h @ w.T)
            h = torch.maximum(pre, self.leak * pre)
        return h.to(xs.dtype)

    __call__ = rep


def sample_prompts(rep: RandomRepresentation, batch: int, length: int, noise_std: float,
                   generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32):
    """(xs (B, k, d), ys (B, k), ws (B, D)): x_i ~ N(0, I_d), w ~ N(0, I_D / D), y_i = ⟨w, Φ*(x_i)⟩ + σε_i,
    drawn in that order from `generator`; ys computed in float64, returned in `dtype`."""
    check_noise_std(noise_std)
    if batch < 1 or length < 1:
        raise ValueError(f"batch and length must be >= 1, got batch={batch}, length={length}")
    xs = torch.randn(batch, length, rep.dim, generator=generator, dtype=dtype)
    ws = torch.randn(batch, rep.rep_dim, generator=generator, dtype=torch.float64) / math.sqrt(rep.rep_dim)
    noise = torch.randn(batch, length, generator=generator, dtype=torch.float64)
    ys = torch.einsum("bkD,bD->bk", rep.rep(xs.double()), ws) + float(noise_std) * noise
    return xs, ys.to(dtype), ws.to(dtype)


class PromptSampler:
    """`sample(batch, length, generator)` for common.icl's prompt streams: `sample_prompts` of a fixed
    representation and noise level."""

    def __init__(self, rep: RandomRepresentation, noise_std: float):
        check_noise_std(noise_std)
        self.rep, self.noise_std = rep, float(noise_std)

    def __call__(self, batch: int, length: int, generator: torch.Generator | None = None):
        return sample_prompts(self.rep, batch, length, self.noise_std, generator)


__all__ = ["RandomRepresentation", "haar_matrix", "sample_prompts", "PromptSampler", "check_noise_std", "check_prompts"]
