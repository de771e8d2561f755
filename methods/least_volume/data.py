"""Mini-tier data: sklearn's 8x8 digits in [0, 1] and a 3-D manifold in R^32; paper-tier images
(MNIST, CIFAR-10) at 32x32 in [0, 1].

Digits come through the shared registry (`common.data.load("digits", ...)`: the fixed seed-0
80/20 split every method uses). It stores pixels as uint8 floor(k · 255/16) for k = 0..16;
round(v · 16/255) recovers k exactly, so x = k/16 is the paper's /16 scaling, not /255.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from common.data import load
from common.data.transforms import to_float


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


# ---- Paper tier: 32x32 images in [0, 1] (MNIST resized 28 -> 32, CIFAR-10; Fashion-MNIST for CPU checks) ----

MNIST_FILES = {  # file -> sha256 of the original LeCun files (the mirror torchvision uses)
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
IMAGE_SETS = ("mnist", "cifar10", "fashion_mnist")


def mnist(split: str, root: str | Path = "data", download: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST (60k/10k 28x28 grey digits) as uint8 (N, 1, 28, 28) and int64 labels, from
    <root>/MNIST/raw (torchvision's layout), else downloaded there when `download` (every file
    checked against its sha256, also copies found on disk). Absent offline: a UserError naming
    the dataset, where it looked and the command that gets it."""
    from common.data.download import find_or_fetch
    from common.data.images import read_idx

    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    folder = find_or_fetch("mnist", [Path(root) / "MNIST" / "raw"], MNIST_FILES, MNIST_URL, download,
                           "python scripts/train.py experiment=least_volume_mnist dataset.download=true "
                           "(on a machine with internet)")
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def to_unit_images(images: torch.Tensor, size: int = 32) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 (N, C, size, size) in [0, 1]; bilinear resize when H != size
    (the official torchvision `Resize(32)` of MNIST's 28x28, here on the float image)."""
    x = to_float(images)
    if x.shape[-1] != size or x.shape[-2] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True).clamp_(0, 1)
    return x


def image_splits(name: str, root: str | Path = "data", download: bool = False, size: int = 32,
                 val_share: float = 0.0, train_size: int | None = None, test_size: int | None = None
                 ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{'train', 'test'} (+ 'val' when val_share > 0): (x float32 (n, C, size, size) in [0, 1],
    labels int64 (n,)). The paper trains on the whole train split (val_share = 0); `train_size`
    / `test_size` take a fixed (seed 0 / 2) subset, for CPU checks."""
    if name not in IMAGE_SETS:
        raise ValueError(f"image dataset must be one of {', '.join(IMAGE_SETS)}, got {name!r}.")
    if not 0 <= val_share < 1:
        raise ValueError(f"val_share must lie in [0, 1), got {val_share}.")
    if name == "mnist":
        train, test = mnist("train", root, download), mnist("test", root, download)
    else:
        train, test = load(name, "train", root, download), load(name, "test", root, download)

    def subset(pair, n, seed):
        if n is None or n >= len(pair[1]):
            return pair
        idx = torch.randperm(len(pair[1]), generator=torch.Generator().manual_seed(seed))[:n]
        return pair[0][idx], pair[1][idx]

    (train_x, train_y), (test_x, test_y) = subset(train, train_size, 0), subset(test, test_size, 2)
    out = {"test": (to_unit_images(test_x, size), test_y)}
    order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(1))
    cut = len(order) - int(round(val_share * len(order)))
    out["train"] = (to_unit_images(train_x[order[:cut]], size), train_y[order[:cut]])
    if val_share > 0:
        out["val"] = (to_unit_images(train_x[order[cut:]], size), train_y[order[cut:]])
    return out
