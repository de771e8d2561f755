"""PPCA on nested prefixes of one unlabeled draw: the first moments of every prefix size by running
sums (one pass over the data, blockwise), then the closed-form MLE from each prefix's scatter. On a
GPU (`device='cuda'`) the sums and the eigen-decompositions run in torch float64 (the paper tier:
d = 1000, m up to 10⁶)."""
from __future__ import annotations

import numpy as np


def ppca_from_scatter(scatter, mean, rank: int) -> tuple[np.ndarray, float, np.ndarray]:
    """The PPCA MLE from S = (1/m) Σ (x − x̄)(x − x̄)ᵀ: σ̂² = mean(λ_{r+1..d}), B̂ = U_r diag(√max(λ_i − σ̂², 0))."""
    eigvals, eigvecs = np.linalg.eigh(np.asarray(scatter, dtype=np.float64))
    eigvals, eigvecs = eigvals[::-1], eigvecs[:, ::-1]
    noise_var = float(np.mean(eigvals[rank:]))
    return eigvecs[:, :rank] * np.sqrt(np.maximum(eigvals[:rank] - noise_var, 0.0)), noise_var, np.asarray(mean)


def prefix_ppca(x, sizes, rank: int, device: str | None = None, block: int = 65536) -> list[tuple[np.ndarray, float, np.ndarray]]:
    """[fit_ppca(x[:m], rank) for m in sizes] from running sums (sizes increasing, <= len(x)).
    `device` None: numpy; else torch on that device (float64)."""
    sizes = [int(m) for m in sizes]
    if sizes != sorted(set(sizes)) or sizes[0] < 2 or sizes[-1] > len(x):
        raise ValueError(f"sizes must increase strictly within [2, {len(x)}], got {sizes}")
    if device is None:
        total, outer, done, out = np.zeros(x.shape[1]), np.zeros((x.shape[1], x.shape[1])), 0, []
        for m in sizes:
            for start in range(done, m, block):
                chunk = x[start:min(start + block, m)]
                total += chunk.sum(axis=0)
                outer += chunk.T @ chunk
            done = m
            mean = total / m
            out.append(ppca_from_scatter(outer / m - np.outer(mean, mean), mean, rank))
        return out
    return _prefix_ppca_torch(x, sizes, rank, device, block)


def _prefix_ppca_torch(x, sizes, rank, device, block):
    import torch

    dim = x.shape[1]
    total = torch.zeros(dim, dtype=torch.float64, device=device)
    outer = torch.zeros(dim, dim, dtype=torch.float64, device=device)
    done, out = 0, []
    for m in sizes:
        for start in range(done, m, block):
            chunk = torch.as_tensor(np.ascontiguousarray(x[start:min(start + block, m)]), device=device)
            total += chunk.sum(dim=0)
            outer += chunk.T @ chunk
        done = m
        mean = total / m
        eigvals, eigvecs = torch.linalg.eigh(outer / m - torch.outer(mean, mean))
        eigvals, eigvecs = eigvals.flip(0), eigvecs.flip(1)
        noise_var = eigvals[rank:].mean()
        loadings = eigvecs[:, :rank] * torch.sqrt(torch.clamp(eigvals[:rank] - noise_var, min=0.0))
        out.append((loadings.cpu().numpy(), float(noise_var), mean.cpu().numpy()))
    return out
