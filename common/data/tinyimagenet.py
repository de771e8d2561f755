"""TinyImageNet-200 (Le & Yang, 2015): 200 ImageNet classes at 64x64 RGB, 500 training images and
50 labelled validation images per class. The official `test` split has no labels, so our `test` is
the labelled `val` split, as in the official Kernel-InfoNCE code (`tiny_imagenet_datamodule.py`
reads tiny-imagenet-200/val as its test set).

Search order (DESIGN.md section 5): <data root>/tiny-imagenet-200 (what unzipping the official
archive produces), the shared offline copy (../shared/data/tiny-imagenet-200 beside the project),
the archive <data root>/tiny-imagenet-200.zip (unpacked once its sha256 matches), then a download
of the archive when allowed, checked by sha256 before it is unpacked.
"""
from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch

from common.data import REGISTRY
from common.data.download import DatasetNotFound, fetch, not_found, sha256

URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
ARCHIVE = "tiny-imagenet-200.zip"
FOLDER = "tiny-imagenet-200"
# Stanford publishes no checksum. This sha256 is the one that several independent public loaders
# and download receipts pin for this URL (one records the archive at 248,100,043 bytes; loaders more
# often pin an md5, 90528d7ca1a48142e341f4ef8d21d0de). Not checked against the file from here (no
# internet). A different file at the URL is refused rather than parsed.
SHA256 = "6198c8ae015e2b3e007c7841da39ec069199b9aa3bfa943a462022fe5e43c821"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / FOLDER
SIDE = 64
HOW = (f"python scripts/train.py ... dataset.download=true on a machine with internet (fetches {URL}, "
       f"237 MiB, and unpacks it into the data root), or put {ARCHIVE} there")


def is_unpacked(folder: Path) -> bool:
    """The official layout: wnids.txt, train/<wnid>/images/*.JPEG, val/val_annotations.txt."""
    return ((folder / "wnids.txt").is_file() and (folder / "train").is_dir()
            and (folder / "val" / "val_annotations.txt").is_file())


def unpack(archive: Path, root: Path) -> Path:
    """Unzip into a temporary folder, then rename: an interrupted unpack never looks complete.
    Every member must sit under tiny-imagenet-200/ (anything else is not this archive, and a
    member path leaving the data root is refused outright)."""
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        stray = [n for n in names if not n.startswith(FOLDER + "/") or ".." in Path(n).parts]
        if stray:
            raise DatasetNotFound(f"{archive} holds {stray[0]!r} outside {FOLDER}/: not the TinyImageNet-200 "
                                  f"archive. Delete it and download again.")
        part = root / (FOLDER + ".part")
        shutil.rmtree(part, ignore_errors=True)
        zf.extractall(part)
    (part / FOLDER).replace(root / FOLDER)
    shutil.rmtree(part, ignore_errors=True)
    return root / FOLDER


def locate(root: Path, download: bool) -> Path:
    """The unpacked tiny-imagenet-200 folder, unpacking or downloading the archive when needed.
    Unpacked copies are not hashed on every load (120k files); archives always are."""
    candidates = [root / FOLDER, SHARED]
    for folder in candidates:
        if is_unpacked(folder):
            return folder
    if (root / FOLDER).exists():   # an unpack or a copy cut short: parsing it would drop classes silently
        raise DatasetNotFound(f"{root / FOLDER} exists but lacks wnids.txt, train/ or val/val_annotations.txt "
                              f"(an incomplete copy). Delete it and rerun: {HOW}.")
    archive = root / ARCHIVE
    if archive.is_file():
        if sha256(archive) != SHA256:
            raise DatasetNotFound(f"{archive} does not match the sha256 of the official archive ({SHA256}); "
                                  f"the copy is corrupt or altered. Delete it and download again.")
    elif download:
        fetch(URL, archive, SHA256)
    else:
        raise not_found("tinyimagenet", [*candidates, archive], HOW)
    folder = unpack(archive, root)
    if not is_unpacked(folder):
        raise DatasetNotFound(f"{archive} unpacked, but {folder} lacks wnids.txt, train/ or "
                              f"val/val_annotations.txt: not the TinyImageNet-200 layout.")
    return folder


def class_index(folder: Path) -> dict[str, int]:
    """wnid -> label: the rank of the wnid in sorted order, which is torchvision ImageFolder's
    order over train/ (the official datamodule's labels)."""
    wnids = sorted({w for w in (folder / "wnids.txt").read_text().split() if w})
    return {w: i for i, w in enumerate(wnids)}


def listing(folder: Path, split: str) -> tuple[list[Path], list[int]]:
    """Image paths and labels of 'train' (train/<wnid>/images/*.JPEG, sorted) or 'test' (the
    labelled val split: val/images/<file> labelled by val/val_annotations.txt)."""
    index = class_index(folder)
    paths, labels = [], []
    if split == "train":
        for wnid, label in index.items():
            files = sorted((folder / "train" / wnid / "images").glob("*.JPEG"))
            if not files:
                raise DatasetNotFound(f"{folder / 'train' / wnid / 'images'} holds no JPEG; the copy of "
                                      f"tinyimagenet is incomplete.")
            paths += files
            labels += [label] * len(files)
        return paths, labels
    for line in (folder / "val" / "val_annotations.txt").read_text().splitlines():
        if not line.strip():
            continue
        name, wnid = line.split("\t")[:2]  # file, wnid, then a bounding box we do not use
        if wnid not in index:
            raise DatasetNotFound(f"val_annotations.txt labels {name} with class {wnid!r}, which "
                                  f"{folder / 'wnids.txt'} does not list.")
        paths.append(folder / "val" / "images" / name)
        labels.append(index[wnid])
    return paths, labels


def decode(paths: list[Path]) -> np.ndarray:
    """(N, 64, 64, 3) uint8. A few training images are greyscale JPEGs: converted to RGB, so that
    every image has three channels."""
    from PIL import Image

    out = np.empty((len(paths), SIDE, SIDE, 3), dtype=np.uint8)  # filled in place: 1.2 GB for train
    for i, path in enumerate(paths):
        with Image.open(path) as img:
            rgb = np.asarray(img.convert("RGB"))
        if rgb.shape != (SIDE, SIDE, 3):
            raise DatasetNotFound(f"{path} is {rgb.shape[1]}x{rgb.shape[0]}, not {SIDE}x{SIDE}: not a "
                                  f"TinyImageNet-200 image.")
        out[i] = rgb
    return out


def load(split: str, root: Path, download: bool):
    """(images uint8 (N, 3, 64, 64), labels int64 (N,)): 100000 for 'train', 10000 for 'test'."""
    paths, labels = listing(locate(Path(root), download), split)
    images = torch.from_numpy(decode(paths)).permute(0, 3, 1, 2).contiguous()
    return images, torch.tensor(labels, dtype=torch.int64)


# Registered here, not in common/data/__init__.py's REGISTRY: every table's code fingerprint holds
# that file, so a line there makes all recorded tables stale. Importing this module (the
# kernel_infonce package does) adds the name; it moves into REGISTRY with the next all-tables re-run.
REGISTRY["tinyimagenet"] = load
