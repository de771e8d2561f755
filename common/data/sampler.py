"""Batches as a pure function of the step, so that resume and DDP see the right data."""
from __future__ import annotations

import torch


class StepSampler:
    """Indices of the global batch for a step: a fresh seeded permutation every epoch.

    With `world_size` > 1 each rank takes a contiguous shard of the same global batch, so
    N processes with per-rank batch B/N see exactly the samples of one process with batch B.
    """

    def __init__(self, num_items: int, global_batch: int, seed: int, rank: int = 0, world_size: int = 1):
        if global_batch % world_size:
            raise ValueError(f"global batch {global_batch} is not divisible by {world_size} ranks")
        if global_batch > num_items:
            raise ValueError(f"batch {global_batch} is larger than the dataset ({num_items} items)")
        self.n, self.batch, self.seed = num_items, global_batch, seed
        self.rank, self.world = rank, world_size
        self.steps_per_epoch = num_items // global_batch  # drop the last partial batch
        self._epoch, self._perm = -1, None

    def __call__(self, step: int) -> torch.Tensor:
        epoch, pos = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=gen)
        glob = self._perm[pos * self.batch:(pos + 1) * self.batch]
        per_rank = self.batch // self.world
        return glob[self.rank * per_rank:(self.rank + 1) * per_rank]
