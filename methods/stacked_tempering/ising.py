"""The 2D Ising data of the issue's second table: Wolff cluster samples of the periodic L x L
lattice, E(s) = -sum s_i s_j over right and down neighbours, p(s) ∝ exp(-beta E(s))."""
from __future__ import annotations

import math

import numpy as np
import torch


def ising_energy(spins: torch.Tensor) -> torch.Tensor:
    """E = -sum_{i,j} s_ij (s_i,j+1 + s_i+1,j) with periodic wrap: (..., L, L) of +-1 -> (...)."""
    if spins.dim() < 2 or spins.shape[-1] != spins.shape[-2]:
        raise ValueError(f"spins must be (..., L, L), got shape {tuple(spins.shape)}")
    s = spins.to(torch.float32)
    return -(s * torch.roll(s, -1, dims=-1) + s * torch.roll(s, -1, dims=-2)).sum((-1, -2))


def wolff_ising(size: int, beta: float, num_samples: int, seed: int = 0, burn_in: int = 200,
                thin: int = 5) -> torch.Tensor:
    """Wolff cluster updates from a random start; after `burn_in` updates one sample every `thin`
    updates. Returns (num_samples, L, L) int8 of +-1."""
    if size < 2 or num_samples < 1 or beta < 0 or burn_in < 0 or thin < 1:
        raise ValueError(f"need size >= 2, num_samples >= 1, beta >= 0, burn_in >= 0, thin >= 1; got "
                         f"{size}, {num_samples}, {beta}, {burn_in}, {thin}")
    rng = np.random.default_rng(seed)
    s = rng.choice(np.array([-1, 1], dtype=np.int8), size=(size, size))
    p_add = 1.0 - math.exp(-2.0 * beta)
    out = np.empty((num_samples, size, size), dtype=np.int8)
    updates, taken = 0, 0
    while taken < num_samples:
        i, j = (int(x) for x in rng.integers(size, size=2))
        sign = s[i, j]
        s[i, j] = -sign
        stack = [(i, j)]
        while stack:
            a, b = stack.pop()
            for c, d in (((a + 1) % size, b), ((a - 1) % size, b), (a, (b + 1) % size), (a, (b - 1) % size)):
                if s[c, d] == sign and rng.random() < p_add:
                    s[c, d] = -sign
                    stack.append((c, d))
        updates += 1
        if updates > burn_in and (updates - burn_in) % thin == 0:
            out[taken] = s
            taken += 1
    return torch.from_numpy(out)
