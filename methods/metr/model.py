"""METR's network: a timm ViT with a class token, EViT reduction at `drop_blocks`, and exits on
[CLS] after `exit_blocks` (official metr/metr_evit.py `EViT`, `mid_heads`). The exits train the
early [CLS] to carry the task, so its attention becomes a task-aware score; they are not used at
inference (only `forward` returns them, for the loss)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from common.data.transforms import to_float, to_signed
from common.nn.token_reduction import SELECT, forward_reduced
from common.nn.vit import build_vit


def _check_blocks(name: str, blocks: Sequence[int], depth: int) -> tuple[int, ...]:
    out = tuple(int(b) for b in blocks)
    bad = [b for b in out if not 0 <= b < depth]
    if bad:
        raise ValueError(f"{name} {list(out)}: blocks {bad} are outside [0, {depth}) (0-based, depth {depth})")
    if len(set(out)) != len(out):
        raise ValueError(f"{name} {list(out)} repeats a block")
    return tuple(sorted(out))


# timm's IMAGENET_DEFAULT_MEAN / _STD, the normalisation DeiT's released checkpoints were trained with
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
NORMALIZE = ("signed", "imagenet")


def exit_head(dim: int, num_classes: int) -> nn.Sequential:
    """z_m = Linear(Tanh(Linear(LN(x_m[CLS])))): dim -> dim -> classes (official create_mid_head)."""
    return nn.Sequential(nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, num_classes))


class METRViT(nn.Module):
    """ViT (class token) on uint8 or [0, 1] images, mapped to [-1, 1] (`normalize="signed"`) or by
    ImageNet's mean and std (`"imagenet"`, for DeiT's released weights). `keep_rate` applies at
    every block of `drop_blocks` (EViT's ceil(rho (N-1)) kept, fused token with `fuse`)."""

    def __init__(self, img_size: int, in_chans: int, num_classes: int, patch_size: int = 16, dim: int = 384,
                 depth: int = 12, heads: int = 6, mlp_ratio: float = 4.0, exit_blocks: Sequence[int] = (3, 6, 9),
                 drop_blocks: Sequence[int] = (3, 6, 9), fuse: bool = True, normalize: str = "signed"):
        super().__init__()
        if normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {NORMALIZE}, got '{normalize}'")
        if normalize == "imagenet" and in_chans != 3:
            raise ValueError(f"normalize='imagenet' needs 3 channels, got in_chans={in_chans}")
        self.normalize = normalize
        self.exit_blocks = _check_blocks("exit_blocks", exit_blocks, depth)
        self.drop_blocks = _check_blocks("drop_blocks", drop_blocks, depth)
        self.depth, self.fuse = depth, bool(fuse)
        self.vit = build_vit(img_size, patch_size, in_chans, num_classes, dim, depth, heads, mlp_ratio, pool="token")
        self.exits = nn.ModuleDict({str(b): exit_head(dim, num_classes) for b in self.exit_blocks})

    def keep_rates(self, keep_rate: float) -> list[float]:
        """One rate per block: `keep_rate` at the drop blocks, 1 elsewhere."""
        return [float(keep_rate) if b in self.drop_blocks else 1.0 for b in range(self.depth)]

    def prepare(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 or [0, 1] images -> the network's input (see `normalize`)."""
        if self.normalize == "signed":
            return to_signed(images)
        mean = images.new_tensor(IMAGENET_MEAN, dtype=torch.float32).view(1, 3, 1, 1)
        std = images.new_tensor(IMAGENET_STD, dtype=torch.float32).view(1, 3, 1, 1)
        return (to_float(images) - mean) / std

    def forward(self, images: torch.Tensor, keep_rate: float = 1.0, select: str = "cls",
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(final logits (B, classes), exit logits in block order: len(exit_blocks) x (B, classes))."""
        if select not in SELECT:
            raise ValueError(f"select must be one of {SELECT}, got '{select}'")
        logits, cls = forward_reduced(self.vit, self.prepare(images), self.keep_rates(keep_rate), fuse=self.fuse,
                                      select=select, generator=generator)
        return logits, [self.exits[str(b)](cls[b]) for b in self.exit_blocks]


__all__ = ["METRViT", "exit_head"]
