"""The federated few-label data (official partial-client setting, `PC`): a pool of training
images split over K clients by the hetero-Dirichlet partition, M clients fully labeled (their
labels kept) and the others fully unlabeled; a slice of each labeled client held out for tuning."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from common import data
from common.federated.partition import dirichlet_partition, label_split
from common.federated.sampling import pick_clients


@dataclass
class FewLabelClients:
    images: torch.Tensor            # (N, C, H, W) float in [0, 1]: the pool
    labels: torch.Tensor            # (N,) int64 (read only on labeled clients and by `upper`)
    clients: list[torch.Tensor]     # pool indices each client trains on
    labeled: list[int]              # the M labeled clients
    val: torch.Tensor               # pool indices held out of the labeled clients (tuning)
    test_images: torch.Tensor
    test_labels: torch.Tensor

    def is_labeled(self, k: int) -> bool:
        return k in self.labeled


def load_pool(ds_cfg, pool_size: int, test_size: int, seed: int, eval_split: str = "test") -> tuple[torch.Tensor, ...]:
    """`pool_size` training images and `test_size` evaluation images drawn with the seed, as
    floats in [0, 1]: test images, or with `eval_split="val"` training images outside the pool
    (the pilot's validation set; the pool is the same either way)."""
    if eval_split not in ("test", "val"):
        raise ValueError(f"eval_split must be test or val, got {eval_split!r}")
    if ds_cfg.name == "svhn":   # the paper tier's; the loader registers itself on import (as krr_st's tinyimagenet)
        import common.data.svhn  # noqa: F401
    x, y = data.load(ds_cfg.name, "train", ds_cfg.root, ds_cfg.download)
    xt, yt = data.load(ds_cfg.name, "test", ds_cfg.root, ds_cfg.download)
    if pool_size + (test_size if eval_split == "val" else 0) > len(y) or test_size > len(yt):
        raise ValueError(f"pool_size={pool_size} / test_size={test_size} exceed the {len(y)} / {len(yt)} images")
    g = torch.Generator().manual_seed(seed * 7919 + 1)
    perm = torch.randperm(len(y), generator=g)
    i = perm[:pool_size]
    j = torch.randperm(len(yt), generator=g)[:test_size]
    if eval_split == "val":
        v = perm[pool_size:pool_size + test_size]
        return x[i].float() / 255.0, y[i], x[v].float() / 255.0, y[v]
    return x[i].float() / 255.0, y[i], xt[j].float() / 255.0, yt[j]


def few_label_clients(images, labels, test_images, test_labels, num_clients: int, num_labeled: int, alpha: float,
                      min_size: int, val_fraction: float, seed: int) -> FewLabelClients:
    """`dirichlet_partition(alpha, min_size, self_balancing=True)` over `num_clients`;
    labeled clients `pick_clients(num_clients, num_labeled, seed)`; `label_split` with fraction 1
    on labeled and 0 on unlabeled clients (the official partial clients); a labeled client's first
    floor(val_fraction n_k) indices of a seeded permutation are held out for tuning."""
    if not 1 <= num_labeled <= num_clients - 1:
        raise ValueError(f"num_labeled must be in [1, {num_clients - 1}] (some clients labeled, some not), "
                         f"got {num_labeled}")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
    parts = dirichlet_partition(labels, num_clients, alpha, seed, min_size=min_size, self_balancing=True)
    chosen = pick_clients(num_clients, num_labeled, seed)
    lab, unlab = label_split(parts, [1.0 if k in chosen else 0.0 for k in range(num_clients)], seed)
    rng = np.random.default_rng([seed, 42])
    clients, val = [], []
    for k in range(num_clients):
        if k in chosen:
            perm = lab[k][torch.from_numpy(rng.permutation(len(lab[k])))]
            cut = int(np.floor(val_fraction * len(perm)))
            val.append(perm[:cut])
            clients.append(perm[cut:].sort().values)
        else:
            clients.append(unlab[k])
    return FewLabelClients(images, labels, clients, chosen, torch.cat(val).sort().values if val else
                           torch.zeros(0, dtype=torch.long), test_images, test_labels)
