"""The mini tier's images: Fashion-MNIST items (28 x 28) on a black 56 x 56 canvas at a uniform
random offset, so the item fills a quarter of the frame and most tokens are background, where
[CLS] attention has something to get wrong. Training offsets are drawn afresh from (seed, step);
test offsets are fixed by one seed shared by every run."""
from __future__ import annotations

import torch


def place_on_canvas(images: torch.Tensor, offsets: torch.Tensor, canvas: int) -> torch.Tensor:
    """images (B, C, h, w) on a zero canvas (B, C, canvas, canvas), image b's top-left corner at
    offsets[b] = (row, col). Same dtype as the images."""
    if images.dim() != 4:
        raise ValueError(f"images must be (B, C, h, w), got {tuple(images.shape)}")
    B, C, h, w = images.shape
    if tuple(offsets.shape) != (B, 2):
        raise ValueError(f"offsets must be (B, 2) = ({B}, 2) (row, col), got {tuple(offsets.shape)}")
    offsets = offsets.long()
    low, high_r, high_c = int(offsets.min()) if B else 0, canvas - h, canvas - w
    if B and (low < 0 or int(offsets[:, 0].max()) > high_r or int(offsets[:, 1].max()) > high_c):
        raise ValueError(f"images of {h}x{w} fall off a {canvas}x{canvas} canvas: offsets must lie in "
                         f"[0, {high_r}] x [0, {high_c}], got rows [{int(offsets[:, 0].min())}, "
                         f"{int(offsets[:, 0].max())}], cols [{int(offsets[:, 1].min())}, {int(offsets[:, 1].max())}]")
    out = images.new_zeros(B, C, canvas * canvas)
    rows = offsets[:, :1] + torch.arange(h)                                       # B, h
    cols = offsets[:, 1:] + torch.arange(w)                                       # B, w
    flat = (rows[:, :, None] * canvas + cols[:, None, :]).reshape(B, 1, h * w).expand(B, C, h * w)
    out.scatter_(2, flat.to(images.device), images.reshape(B, C, h * w))
    return out.view(B, C, canvas, canvas)


def random_offsets(n: int, item: int, canvas: int, generator: torch.Generator) -> torch.Tensor:
    """(n, 2) uniform top-left corners in [0, canvas - item]^2."""
    return torch.randint(0, canvas - item + 1, (n, 2), generator=generator)


def step_generator(seed: int, step: int) -> torch.Generator:
    """The generator of one training step's offsets: a pure function of (seed, step)."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))


__all__ = ["place_on_canvas", "random_offsets", "step_generator"]
