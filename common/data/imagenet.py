"""ImageNet-1k (ILSVRC2012): the official archives, fetched and checked by sha256, decoded to uint8.

Files (the data root, or `../shared/data/imagenet` beside the project):
- ILSVRC2012_devkit_t12.tar.gz: data/ILSVRC2012_validation_ground_truth.txt (ILSVRC2012_ID per
  validation image, 1-based) and data/meta.mat (`synsets`: ILSVRC2012_ID -> WNID);
- ILSVRC2012_img_val.tar: 50,000 JPEGs ILSVRC2012_val_%08d.JPEG;
- ILSVRC2012_img_train.tar: one <wnid>.tar per class, each holding <wnid>_<n>.JPEG.
Labels are the rank of the WNID in sorted order (torchvision's ImageNet / ImageFolder order, the
one timm's released checkpoints, DeiT's among them, are trained with). The archives are hashed
every time they are read (a different file at a path is refused, never parsed); `download=True`
fetches a missing archive from image-net.org (an account's access is needed there for the image
archives) and checks it before it is used.

Images are decoded as DeiT evaluates (resize the shorter side to side / 0.875, bicubic, centre crop
side x side). The validation split is read lazily: `load_split('test')` indexes the archive's
members once (their offsets, not their bytes) and returns an `ArchiveImages`, which reads and
decodes JPEGs only when indexed (x[i] (3, side, side), x[idx] (B, 3, side, side) uint8), so no
image is held in memory (7.5 GB for the split at 224 if it were). The training split (1.28M
images) is for `common.data.imagenet_stream` (a streaming IterableDataset with DeiT's training
transform); `load_split('train')` decodes into memory and serves tests and small subsets
(`limit` images per class).
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import torch

from common.data import REGISTRY
from common.data.download import DatasetNotFound, fetch, not_found, sha256

BASE_URL = "https://image-net.org/data/ILSVRC/2012/"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
ARCHIVES = {"test": "ILSVRC2012_img_val.tar", "train": "ILSVRC2012_img_train.tar"}
# sha256 of the official files, as pinned by torchvision's prototype ImageNet dataset
# (_IMAGES_CHECKSUMS and the devkit's resource) and by independent loaders that record the same
# values beside the official md5s (val 29b22e2961454d5413ddabcf34fc5622, devkit
# fa75699e90414af021442c21a62c3abf). Not checked against the files from here (no internet).
SHA256 = {
    DEVKIT: "b59243268c0d266621fd587d2018f69e906fb22875aca0e295b48cafaa927953",
    ARCHIVES["test"]: "c7e06a6c0baccf06d8dbeb6577d71efff84673a5dbdd50633ab44f8ea0456ae0",
    ARCHIVES["train"]: "b08200a27a8e34218a0e58fde36b0fe8f73bc377f4acea2d91602057c3ca45bb",
}
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "imagenet"
GROUND_TRUTH = "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt"
META = "ILSVRC2012_devkit_t12/data/meta.mat"
HOW = (f"put {DEVKIT} and {ARCHIVES['test']} (and {ARCHIVES['train']} for training) into the data root, "
       f"or run with dataset.download=true on a machine with access to {BASE_URL}")


def archive(name: str, root: Path, download: bool) -> Path:
    """The path of official file `name`, its sha256 checked; fetched from BASE_URL when missing and
    `download` (the copy is checked before it replaces anything)."""
    if name not in SHA256:
        raise ValueError(f"unknown ImageNet archive {name!r}; known: {', '.join(sorted(SHA256))}")
    candidates = [Path(root) / name, SHARED / name]
    for path in candidates:
        if path.is_file():
            if sha256(path) != SHA256[name]:
                raise DatasetNotFound(f"{path} does not match the sha256 of the official {name} ({SHA256[name]}); "
                                      f"the copy is corrupt or altered. Delete it and fetch it again.")
            return path
    if not download:
        raise not_found("imagenet", candidates, HOW)
    return fetch(BASE_URL + name, Path(root) / name, SHA256[name])


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    try:
        f = tar.extractfile(name)
    except KeyError:
        f = None
    if f is None:
        raise DatasetNotFound(f"{tar.name} lacks {name}: not the ILSVRC2012 devkit.")
    return f.read()


def devkit_labels(devkit: Path) -> tuple[list[str], list[int]]:
    """(the 1,000 WNIDs in sorted order, the validation images' labels in file order): the devkit's
    ground truth holds ILSVRC2012_IDs, meta.mat maps them to WNIDs, a label is the WNID's rank."""
    from scipy.io import loadmat

    with tarfile.open(devkit, "r:gz") as tar:
        truth = _member(tar, GROUND_TRUTH).decode().split()
        meta = loadmat(io.BytesIO(_member(tar, META)), squeeze_me=True)["synsets"]
    id_to_wnid = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in meta if int(s["num_children"]) == 0}
    wnids = sorted(id_to_wnid.values())
    rank = {w: i for i, w in enumerate(wnids)}
    try:
        labels = [rank[id_to_wnid[int(t)]] for t in truth]
    except KeyError as err:
        raise DatasetNotFound(f"{devkit}: the ground truth names ILSVRC2012_ID {err}, which meta.mat does not list "
                              f"among its leaf synsets.") from None
    return wnids, labels


def decode(data: bytes, side: int) -> np.ndarray:
    """(side, side, 3) uint8, DeiT's evaluation transform (timm, crop_pct 0.875): the shorter side
    to int(side / 0.875), bicubic, then the centre side x side; greyscale and CMYK JPEGs become RGB."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img = img.convert("RGB")
        short = int(side / 0.875)
        w, h = img.size
        # the long side truncated, the crop's corner rounded: torchvision's Resize and CenterCrop
        size = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
        img = img.resize(size, Image.BICUBIC)
        left, top = int(round((size[0] - side) / 2.0)), int(round((size[1] - side) / 2.0))
        return np.asarray(img.crop((left, top, left + side, top + side)))


class ArchiveImages:
    """The JPEG members of an uncompressed tar, read and decoded (`decode`, DeiT's evaluation
    transform) when indexed: x[i] -> (3, side, side), x[slice | list | LongTensor] -> (B, 3, side,
    side), uint8. Holds (offset, size) per image, never the images; the file is opened per access,
    so the object can cross into DataLoader workers."""

    dtype = torch.uint8

    def __init__(self, path: Path, members: list[tuple[int, int]], side: int):
        self.path, self.members, self.side = Path(path), list(members), int(side)

    def __len__(self) -> int:
        return len(self.members)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.members), 3, self.side, self.side)

    def read(self, i: int) -> bytes:
        offset, size = self.members[i]
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    def image(self, i: int) -> torch.Tensor:
        return torch.from_numpy(decode(self.read(i), self.side).copy()).permute(2, 0, 1).contiguous()

    def __getitem__(self, idx):
        if isinstance(idx, (int, np.integer)) or (torch.is_tensor(idx) and idx.dim() == 0):
            i = int(idx)
            if not -len(self) <= i < len(self):
                raise IndexError(f"image {i} of {len(self)}")
            return self.image(i % len(self))
        if isinstance(idx, slice):
            idx = range(*idx.indices(len(self)))
        elif torch.is_tensor(idx):
            idx = idx.tolist()
        items = [self[int(i)] for i in idx]
        return torch.stack(items) if items else torch.empty((0, 3, self.side, self.side), dtype=torch.uint8)


def _jpegs(tar: tarfile.TarFile):
    for m in tar:
        if m.isfile() and m.name.endswith(".JPEG"):
            yield m, tar.extractfile(m).read()


def load_split(split: str, root: Path, download: bool, side: int = 224, limit: int | None = None):
    """(images (N, 3, side, side) uint8, labels int64 (N,)) of 'test' (the labelled validation
    split, in ILSVRC2012_val_ order; images an `ArchiveImages`, decoded when indexed) or 'train'
    (classes in sorted WNID order, images sorted; decoded into a tensor); `limit`: at most that many
    images (validation) or that many per class (train)."""
    if split not in ARCHIVES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if side < 1 or (limit is not None and limit < 1):
        raise ValueError(f"side and limit must be >= 1, got side={side}, limit={limit}")
    wnids, val_labels = devkit_labels(archive(DEVKIT, root, download))
    rank = {w: i for i, w in enumerate(wnids)}
    images, labels = [], []
    with tarfile.open(archive(ARCHIVES[split], root, download)) as tar:
        if split == "test":   # headers only: tarfile seeks over the members' data
            found = sorted((m.name, m.offset_data, m.size) for m in tar if m.isfile() and m.name.endswith(".JPEG"))
            if len(found) != len(val_labels):
                raise DatasetNotFound(f"{tar.name} holds {len(found)} JPEGs, the devkit labels {len(val_labels)}.")
            n = len(found) if limit is None else min(limit, len(found))
            return (ArchiveImages(Path(tar.name), [(o, s) for _, o, s in found[:n]], side),
                    torch.tensor(val_labels[:n], dtype=torch.int64))
        else:
            for m in sorted((m for m in tar if m.isfile()), key=lambda m: m.name):
                wnid = Path(m.name).stem
                if wnid not in rank:
                    raise DatasetNotFound(f"{tar.name} holds {m.name}, not a class of the devkit.")
                with tarfile.open(fileobj=io.BytesIO(tar.extractfile(m).read())) as inner:
                    found = sorted((mm.name, data) for mm, data in _jpegs(inner))
                for _, data in found[:limit]:
                    images.append(decode(data, side))
                    labels.append(rank[wnid])
    if not images:
        raise DatasetNotFound(f"{ARCHIVES[split]} holds no JPEG.")
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()
    return x, torch.tensor(labels, dtype=torch.int64)


def load(split: str, root: Path, download: bool):
    """The registry's loader: 224 x 224, every image (validation: lazy; training: in memory, see
    the module docstring)."""
    return load_split(split, root, download)


# Registered here, not in common/data/__init__.py's REGISTRY (every table's fingerprint holds that
# file): importing this module (methods.metr's paper tier does) adds the name.
REGISTRY["imagenet"] = load
