"""The long-tailed training set: an exponential profile over classes (Cao et al. 2019), as
the P²OT code builds CIFAR-100-LT."""
from __future__ import annotations

import torch


def long_tailed_counts(num_classes: int, imbalance_ratio: float, max_per_class: int) -> list[int]:
    """Images kept per class: int(max_per_class · r^(−c/(K−1))), c = 0 .. K−1 (head first)."""
    if imbalance_ratio < 1:
        raise ValueError(f"imbalance_ratio (largest / smallest class) must be >= 1, got {imbalance_ratio}")
    if max_per_class < 1:
        raise ValueError(f"max_per_class must be >= 1, got {max_per_class}")
    if num_classes == 1:
        return [int(max_per_class)]
    return [int(max_per_class * imbalance_ratio ** (-c / (num_classes - 1))) for c in range(num_classes)]


def long_tailed_indices(labels: torch.Tensor, imbalance_ratio: float, max_per_class: int,
                        seed: int) -> torch.LongTensor:
    """Indices (sorted) of a long-tailed subset of `labels` (N,): class c keeps
    int(max_per_class · r^(−c/(K−1))) of its images, drawn without replacement with `seed`;
    K = labels.max() + 1."""
    labels = torch.as_tensor(labels).long()
    num_classes = int(labels.max()) + 1
    counts = long_tailed_counts(num_classes, imbalance_ratio, max_per_class)
    gen = torch.Generator().manual_seed(seed)
    keep = []
    for c, n_keep in enumerate(counts):
        members = torch.nonzero(labels == c).flatten()
        if len(members) < n_keep:
            raise ValueError(f"class {c} has {len(members)} images, fewer than the {n_keep} the "
                             f"long-tailed profile (r={imbalance_ratio}, max_per_class={max_per_class}) needs")
        keep.append(members[torch.randperm(len(members), generator=gen)[:n_keep]])
    return torch.cat(keep).sort().values
