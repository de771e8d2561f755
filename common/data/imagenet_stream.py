"""ImageNet-1k's training split as a stream (an IterableDataset): ILSVRC2012_img_train.tar (138 GB,
one <wnid>.tar per class, each holding <wnid>_<n>.JPEG) is read front to back and never held in
memory; every image is decoded and transformed as DeiT trains (`DeiTTrainCrop`), and yielded as
(uint8 (3, side, side), label) with the label of common.data.imagenet (the WNID's rank in sorted
order).

Sharding: the classes are the unit. Each pass (`set_epoch`) permutes the 1,000 class tars with
(seed, epoch), the same permutation on every rank; shard s = rank * workers + worker of S =
world_size * workers takes classes s, s + S, ... of it, so the shards together see every image
once a pass (shards hold 1000 // S or one more classes: ranks' passes differ in length by at most
one class, which a loop that counts steps, not passes, never notices).

Order: a shard keeps `interleave` of its class tars open at once and draws each next image from one
of them at random, and a shuffle buffer of `shuffle_buffer` images mixes further (each incoming
image swaps out a random one). With `stream=True` the outer archive is read in tarfile's streaming
mode ("r|", e.g. from a pipe): a shard then reads the whole archive (skipping is reading), holds one
class open at a time (interleave 1) and the shuffle buffer is all the mixing; the default opens the
regular file in seekable mode, reads the 1,000 outer headers, and each shard seeks to its own class
tars, whose members it reads in streaming mode (inner tars of ~140 MB are never held either).

Memory: the shuffle buffer's images (10,000 at 224: 1.5 GB per shard process) and one JPEG at a
time per open class.
"""
from __future__ import annotations

import io
import math
import tarfile
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from common.data import imagenet as inet
from common.data.download import DatasetNotFound


def resized_crop_params(width: int, height: int, rng: np.random.Generator, scale=(0.08, 1.0),
                        ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """(top, left, crop height, crop width) of a random resized crop (torchvision's and timm's
    RandomResizedCrop, which DeiT trains with): an area share uniform in `scale` and a log-uniform
    aspect ratio in `ratio`, ten tries; else the centre crop with the ratio clamped into `ratio`."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class DeiTTrainCrop:
    """DeiT's geometric training transform (timm create_transform, is_training): a random resized
    crop (scale (0.08, 1), ratio (3/4, 4/3)) resized to side x side bicubic, then a horizontal flip
    with probability `hflip`; PIL image (any mode) -> uint8 (3, side, side). RandAugment, random
    erasing, mixup and cutmix are not applied (they act on the batch or the float tensor)."""

    def __init__(self, side: int = 224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), hflip: float = 0.5):
        scale, ratio = tuple(float(s) for s in scale), tuple(float(r) for r in ratio)
        if side < 1:
            raise ValueError(f"side must be >= 1, got {side}")
        if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f"scale must be (low, high) with 0 < low <= high <= 1, got {scale}")
        if len(ratio) != 2 or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"ratio must be (low, high) with 0 < low <= high, got {ratio}")
        if not 0 <= hflip <= 1:
            raise ValueError(f"hflip must be a probability in [0, 1], got {hflip}")
        self.side, self.scale, self.ratio, self.hflip = int(side), scale, ratio, float(hflip)

    def __call__(self, img, rng: np.random.Generator) -> torch.Tensor:
        from PIL import Image

        img = img.convert("RGB")
        top, left, h, w = resized_crop_params(img.width, img.height, rng, self.scale, self.ratio)
        # crop, then resize (torchvision's resized_crop; PIL's resize(box=) would filter across the box's edge)
        out = img.crop((left, top, left + w, top + h)).resize((self.side, self.side), Image.BICUBIC)
        if rng.random() < self.hflip:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(out)).permute(2, 0, 1).contiguous()


class ImageNetTrainStream(IterableDataset):
    """(uint8 (3, side, side), label int) from ILSVRC2012_img_train.tar under `root` (sha256-checked,
    fetched with `download`, as common.data.imagenet), sharded over `world_size` ranks and the
    DataLoader's workers, shuffled per pass by (seed, epoch); see the module docstring.
    `transform(PIL image, rng) -> tensor` replaces DeiT's crop (`DeiTTrainCrop(side)`)."""

    def __init__(self, root: str | Path = "data", download: bool = False, side: int = 224, shuffle_buffer: int = 10_000,
                 interleave: int = 16, seed: int = 0, rank: int = 0, world_size: int = 1, stream: bool = False,
                 transform: Callable | None = None):
        if shuffle_buffer < 1 or interleave < 1:
            raise ValueError(f"shuffle_buffer and interleave must be >= 1, got {shuffle_buffer}, {interleave}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must lie in [0, world_size) with world_size >= 1, got rank {rank} of {world_size}")
        if stream and interleave != 1:
            raise ValueError(f"stream=True reads one class at a time: interleave must be 1, got {interleave}")
        self.transform = DeiTTrainCrop(side) if transform is None else transform
        self.path = inet.archive(inet.ARCHIVES["train"], Path(root), download)
        wnids, _ = inet.devkit_labels(inet.archive(inet.DEVKIT, Path(root), download))
        self.rank_of = {w: i for i, w in enumerate(wnids)}
        self.shuffle_buffer, self.interleave, self.seed = int(shuffle_buffer), int(interleave), int(seed)
        self.rank, self.world_size, self.stream, self.epoch = int(rank), int(world_size), bool(stream), 0

    def set_epoch(self, epoch: int) -> None:
        """The pass whose class permutation and shuffles the next iteration uses."""
        self.epoch = int(epoch)

    def _label(self, name: str) -> int:
        wnid = Path(name).name[:-len(".tar")] if name.endswith(".tar") else None
        if wnid not in self.rank_of:
            raise DatasetNotFound(f"{self.path} holds {name}, not a <wnid>.tar of a devkit class.")
        return self.rank_of[wnid]

    def _shard(self) -> tuple[int, int]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shards = self.world_size * workers
        if shards > len(self.rank_of):
            raise ValueError(f"{shards} shards (world_size {self.world_size} x {workers} workers) for "
                             f"{len(self.rank_of)} classes: a shard is at least one class tar")
        return self.rank * workers + worker, shards

    def _mine(self, n: int, shard: int, shards: int) -> list[int]:
        """The positions (of n class tars in name order) that this shard reads this pass, in the order
        it reads them."""
        order = np.random.default_rng([self.seed, self.epoch]).permutation(n)
        return [int(i) for i in order[shard::shards]]

    @staticmethod
    def _jpegs(fileobj) -> Iterator[bytes]:
        with tarfile.open(fileobj=fileobj, mode="r|") as inner:
            for _, data in inet._jpegs(inner):
                yield data

    def records(self, shard: int, shards: int, rng: np.random.Generator) -> Iterator[tuple[bytes, int]]:
        """(JPEG bytes, label) of this shard's classes, `interleave` classes open at once."""
        if self.stream:
            with open(self.path, "rb") as f, tarfile.open(fileobj=f, mode="r|") as tar:
                members = (m for m in tar if m.isfile())
                # archive order stands for the pass's permutation (a stream cannot be reordered)
                for i, m in enumerate(members):
                    if i % shards == shard:
                        label = self._label(m.name)
                        for data in self._jpegs(tar.extractfile(m)):
                            yield data, label
            return
        with tarfile.open(self.path, "r:") as tar:
            classes = sorted((m for m in tar if m.isfile()), key=lambda m: m.name)
            if len(classes) != len(self.rank_of):
                raise DatasetNotFound(f"{self.path} holds {len(classes)} class tars, the devkit lists {len(self.rank_of)}.")
            todo = [classes[i] for i in self._mine(len(classes), shard, shards)]
            todo.reverse()
            open_: list[tuple[Iterator[bytes], int]] = []
            while todo or open_:
                while todo and len(open_) < self.interleave:
                    m = todo.pop()
                    open_.append((self._jpegs(tar.extractfile(m)), self._label(m.name)))
                k = int(rng.integers(len(open_)))
                jpegs, label = open_[k]
                data = next(jpegs, None)
                if data is None:
                    open_.pop(k)
                else:
                    yield data, label

    def __iter__(self):
        from PIL import Image

        shard, shards = self._shard()
        rng = np.random.default_rng([self.seed, self.epoch, shard])
        buffer: list = []
        for data, label in self.records(shard, shards, rng):
            with Image.open(io.BytesIO(data)) as img:
                item = (self.transform(img, rng), label)
            if len(buffer) < self.shuffle_buffer:
                buffer.append(item)
                continue
            k = int(rng.integers(len(buffer)))
            buffer[k], item = item, buffer[k]
            yield item
        for k in rng.permutation(len(buffer)):
            yield buffer[int(k)]


__all__ = ["DeiTTrainCrop", "ImageNetTrainStream", "resized_crop_params"]
