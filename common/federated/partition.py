"""Client partitions: a fixed split by class proportions, the Dirichlet (hetero-Dirichlet) split
of FedLab/FedML with Flower's knobs (`alpha`, `min_size`, `self_balancing`, `seed`), and the
labeled / unlabeled split inside each client. Every draw comes from one
`numpy.random.default_rng(seed)`, in the order written in each docstring, so a partition is a
pure function of its arguments (no global RNG, unlike fedlab 1.3's)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def _labels_array(labels) -> np.ndarray:
    arr = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {tuple(arr.shape)}")
    if arr.size and (not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0):
        raise ValueError("labels must be non-negative integers (class ids 0..C-1)")
    return arr.astype(np.int64)


def _cut(permuted: np.ndarray, p: np.ndarray) -> list[np.ndarray]:
    """Client k gets floor(n S_k) - floor(n S_{k-1}) of `permuted` (S the cumulative sum of p);
    the last client the rest."""
    cuts = np.floor(len(permuted) * np.cumsum(p)[:-1]).astype(np.int64)
    return np.split(permuted, np.clip(cuts, 0, len(permuted)))


def _as_tensors(parts: list[list[np.ndarray]]) -> list[torch.Tensor]:
    return [torch.from_numpy(np.sort(np.concatenate(p)) if p else np.zeros(0, np.int64)).long() for p in parts]


def split_by_proportions(labels, proportions, seed: int) -> list[torch.Tensor]:
    """`proportions` (C, K), rows summing to 1: class c's indices in `rng.permutation` order, cut
    at floor(n_c cumsum(p_c)[:-1]); each client's indices sorted."""
    y = _labels_array(labels)
    p = np.asarray(proportions, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 1:
        raise ValueError(f"proportions must be a (classes, clients) matrix, got shape {p.shape}")
    if (p < 0).any() or not np.allclose(p.sum(1), 1.0, atol=1e-6):
        raise ValueError(f"each row of proportions must be non-negative and sum to 1, got row sums {p.sum(1)}")
    if y.size and y.max() >= p.shape[0]:
        raise ValueError(f"labels go up to {y.max()} but proportions has {p.shape[0]} class rows")
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(p.shape[1])]
    for c in range(p.shape[0]):
        idx = np.flatnonzero(y == c)
        for k, piece in enumerate(_cut(idx[rng.permutation(len(idx))], p[c])):
            parts[k].append(piece)
    return _as_tensors(parts)


def dirichlet_partition(labels, num_clients: int, alpha: float, seed: int, min_size: int = 0,
                        self_balancing: bool = False, max_tries: int = 100) -> list[torch.Tensor]:
    """Per try, per class c in order: `rng.permutation` of its indices, then
    p = rng.dirichlet(alpha 1_K); with `self_balancing` p_k <- 0 for clients already holding
    >= N/K samples, renormalised (kept as drawn if all are zero); cut as `split_by_proportions`.
    The first try whose smallest client holds >= `min_size` samples; one rng for all tries."""
    y = _labels_array(labels)
    n = len(y)
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    if min_size < 0 or min_size * num_clients > n:
        raise ValueError(f"min_size={min_size} x {num_clients} clients exceeds the {n} samples")
    if max_tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries}")
    rng = np.random.default_rng(seed)
    num_classes = int(y.max()) + 1 if n else 0
    smallest = 0
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        held = np.zeros(num_clients, dtype=np.int64)
        for c in range(num_classes):
            idx = np.flatnonzero(y == c)
            permuted = idx[rng.permutation(len(idx))]
            p = rng.dirichlet(alpha * np.ones(num_clients))
            if self_balancing:
                kept = np.where(held >= n / num_clients, 0.0, p)
                if kept.sum() > 0:
                    p = kept / kept.sum()
            for k, piece in enumerate(_cut(permuted, p)):
                parts[k].append(piece)
                held[k] += len(piece)
        smallest = int(held.min())
        if smallest >= min_size:
            return _as_tensors(parts)
    raise ValueError(f"dirichlet_partition: no split in {max_tries} tries gave every client >= min_size="
                     f"{min_size} samples (last smallest {smallest}); raise alpha or lower min_size")


def label_split(parts: Sequence[torch.Tensor], fraction, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per client in order: perm = rng.permutation(n_k); the first floor(fraction n_k + 1e-9)
    are labeled. `fraction` is one number or one per client ([1, 0, 1, ...]: partial clients)."""
    fractions = [fraction] * len(parts) if np.isscalar(fraction) else list(fraction)
    if len(fractions) != len(parts):
        raise ValueError(f"fraction has {len(fractions)} entries for {len(parts)} clients")
    for f in fractions:
        if not 0.0 <= float(f) <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {f!r}")
    rng = np.random.default_rng(seed)
    labeled, unlabeled = [], []
    for part, f in zip(parts, fractions):
        part = torch.as_tensor(part, dtype=torch.long)
        perm = torch.from_numpy(rng.permutation(len(part)))
        m = int(np.floor(float(f) * len(part) + 1e-9))
        labeled.append(part[perm[:m]].sort().values)
        unlabeled.append(part[perm[m:]].sort().values)
    return labeled, unlabeled
