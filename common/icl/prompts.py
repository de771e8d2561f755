"""Prompts for in-context learning: the shape check and the seeded prompt streams (moved unchanged
from methods/mixreg_transformer, issue #49; `fresh_prompt_batches` now takes the sampling function)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from common.data.sampler import StepSampler

# the stream key of the training prompts: (seed, TRAIN_STREAM, step); the packages number their
# other streams (test 0, validation 2, ...) around it
TRAIN_STREAM = 1


def check_prompts(xs: torch.Tensor, ys: torch.Tensor) -> None:
    """xs (B, k, d) and ys (B, k) describe the same prompts."""
    if xs.dim() != 3 or ys.dim() != 2 or xs.shape[:2] != ys.shape:
        raise ValueError(f"prompts need xs of shape (B, k, d) and ys of shape (B, k), got {tuple(xs.shape)} "
                         f"and {tuple(ys.shape)}")


def stream_seed(seed: int, *keys: int) -> int:
    """A 64-bit seed for the stream (seed, *keys); distinct keys give independent streams."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1, dtype=np.uint64)[0])


def fresh_prompt_batches(sample: Callable, batch: int, length: int, seed: int,
                         rank: int = 0, world_size: int = 1) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """batch_fn(step) -> (xs (batch / world_size, length, d), ys (batch / world_size, length)):
    this rank's share of `batch` new prompts at every step, a pure function of (seed, step), so a
    resumed run sees the same prompts and N ranks together see exactly one process's prompts.
    `sample(batch, length, generator)` returns (xs, ys, ...) (anything after ys is dropped)."""
    if batch % world_size:
        raise ValueError(f"batch {batch} is not divisible by the {world_size} ranks")

    def batch_fn(step: int):
        gen = torch.Generator().manual_seed(stream_seed(seed, TRAIN_STREAM, step))
        xs, ys = sample(batch, length, gen)[:2]
        return xs[rank::world_size], ys[rank::world_size]
    return batch_fn


def fixed_prompt_batches(xs: torch.Tensor, ys: torch.Tensor, batch: int, seed: int, rank: int = 0,
                         world_size: int = 1) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """batch_fn(step) drawing from a fixed set of prompts (the sample-efficiency runs):
    a seeded permutation every epoch, sharded over ranks."""
    sampler = StepSampler(len(xs), batch, seed, rank, world_size)

    def batch_fn(step: int):
        index = sampler(step)
        return xs[index], ys[index]
    return batch_fn


def seen_prompts(batch_fn: Callable[[int], tuple], num_prompts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `num_prompts` training prompts, in the order the model saw them."""
    xs, ys, step, count = [], [], 0, 0
    while count < num_prompts:
        x, y = batch_fn(step)[:2]
        xs.append(x), ys.append(y)
        step, count = step + 1, count + len(x)
    return torch.cat(xs)[:num_prompts], torch.cat(ys)[:num_prompts]
