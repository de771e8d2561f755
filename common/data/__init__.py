"""Dataset registry: `load(name, split, root, download)` for every dataset the repo uses."""
from __future__ import annotations

from pathlib import Path

import torch

from common.config import UserError
from common.data import images
from common.data.download import DatasetNotFound
from common.data.sampler import StepSampler

REGISTRY = {
    "fashion_mnist": images.fashion_mnist,
    "digits": images.digits,
    "mnist5k": images.mnist5k,
    "cifar10": images.torchvision_set("CIFAR10", "cifar-10-batches-py"),
    "cifar100": images.torchvision_set("CIFAR100", "cifar-100-python"),
    "stl10": images.torchvision_set("STL10", "stl10_binary"),
}


def load(name: str, split: str, root: str | Path = "data", download: bool = False):
    """Return (images uint8 (N, C, H, W), labels int64 (N,)) for split 'train' or 'test'."""
    if name not in REGISTRY:
        raise UserError(f"unknown dataset '{name}'. Available: {', '.join(sorted(REGISTRY))}.", exit_code=2)
    if split not in ("train", "test"):
        raise UserError(f"split must be 'train' or 'test', got '{split}'")
    return REGISTRY[name](split, Path(root), download)


def _subset(images, labels, size, seed: int):
    if size is None or size >= len(labels):
        return images, labels
    idx = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))[:size]
    return images[idx], labels[idx]


def image_splits(ds_cfg) -> dict[str, tuple]:
    """The three image splits an SSL run needs, subset as `ds_cfg` says (fixed seed 0, so every
    method and every run seed sees the same images):
    'train' (pre-training), 'eval_train' (fit of the probe / kNN), 'test'."""
    train = load(ds_cfg.name, "train", ds_cfg.root, ds_cfg.download)
    test = load(ds_cfg.name, "test", ds_cfg.root, ds_cfg.download)
    return {"train": _subset(*train, ds_cfg.train_size, 0),
            "eval_train": _subset(*train, ds_cfg.eval_train_size, 1),
            "test": _subset(*test, ds_cfg.test_size, 2)}


__all__ = ["load", "image_splits", "REGISTRY", "DatasetNotFound", "StepSampler"]
