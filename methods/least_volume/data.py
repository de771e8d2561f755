"""Mini-tier data: sklearn's 8x8 digits in [0, 1] and a 3-D manifold in R^32.

Digits come through the shared registry (`common.data.load("digits", ...)`: the fixed seed-0
80/20 split every method uses). It stores pixels as uint8 floor(k · 255/16) for k = 0..16;
round(v · 16/255) recovers k exactly, so x = k/16 is the paper's /16 scaling, not /255.
"""
from __future__ import annotations

import torch

from common.data import load


def digits_splits(val_share: float = 0.2, root: str = "data") -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{'train', 'val', 'test'}: (x float32 (n, 64) in [0, 1], labels int64 (n,)). Validation is
    the last `val_share` of the registry's train split after a fixed (seed 1) shuffle."""
    if not 0 < val_share < 1:
        raise ValueError(f"val_share must lie in (0, 1), got {val_share}.")

    def flat(images: torch.Tensor) -> torch.Tensor:
        return (images.double() * 16 / 255).round().div(16).flatten(1).float()  # (n, 1, 8, 8) -> (n, 64)

    train_x, train_y = load("digits", "train", root)
    test_x, test_y = load("digits", "test", root)
    order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(1))
    cut = len(order) - int(round(val_share * len(order)))
    fit, val = order[:cut], order[cut:]
    return {"train": (flat(train_x[fit]), train_y[fit]), "val": (flat(train_x[val]), train_y[val]),
            "test": (flat(test_x), test_y)}


def manifold_map(intrinsic_dim: int = 3, ambient_dim: int = 32, hidden: int = 64, map_seed: int = 0) -> torch.nn.Module:
    """A fixed random smooth map R^d -> (0, 1)^D: Linear-tanh-Linear, then a sigmoid. Weights are
    N(0, 1/fan_in) times 2, so the map bends the cube but stays injective in practice."""
    gen = torch.Generator().manual_seed(map_seed)
    first = torch.nn.Linear(intrinsic_dim, hidden)
    second = torch.nn.Linear(hidden, ambient_dim)
    with torch.no_grad():
        for layer, fan_in in ((first, intrinsic_dim), (second, hidden)):
            layer.weight.copy_(2 * torch.randn(layer.weight.shape, generator=gen) / fan_in ** 0.5)
            layer.bias.copy_(0.5 * torch.randn(layer.bias.shape, generator=gen))
    net = torch.nn.Sequential(first, torch.nn.Tanh(), second, torch.nn.Sigmoid())
    return net.requires_grad_(False)


def manifold_samples(n: int, seed: int, intrinsic_dim: int = 3, ambient_dim: int = 32, map_seed: int = 0):
    """(x (n, D) float32 in (0, 1), u (n, d)) with u ~ U[−1, 1]^d pushed through `manifold_map`."""
    u = 2 * torch.rand(n, intrinsic_dim, generator=torch.Generator().manual_seed(seed)) - 1
    return manifold_map(intrinsic_dim, ambient_dim, map_seed=map_seed)(u), u


def manifold_splits(n_train: int = 1400, n_val: int = 300, n_test: int = 400, intrinsic_dim: int = 3,
                    ambient_dim: int = 32, map_seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{'train', 'val', 'test'}: (x, u) from one fixed map, independent samples per split."""
    sizes = {"train": n_train, "val": n_val, "test": n_test}
    return {name: manifold_samples(n, seed=100 + i, intrinsic_dim=intrinsic_dim, ambient_dim=ambient_dim,
                                   map_seed=map_seed)
            for i, (name, n) in enumerate(sizes.items())}
