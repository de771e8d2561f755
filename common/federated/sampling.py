"""Seeded client sampling and local batches, pure functions of (seed, round, client, epoch):
FedML's per-round seeded sampling, written like `common.data.sampler.StepSampler` (seed 100_003
apart per round / epoch), so a resumed run draws what the uninterrupted one drew."""
from __future__ import annotations

import torch


def pick_clients(num_clients: int, num: int, seed: int) -> list[int]:
    """sorted(torch.randperm(num_clients, manual_seed(seed))[:num])."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if not 1 <= num <= num_clients:
        raise ValueError(f"cannot pick {num} clients per round out of {num_clients}")
    perm = torch.randperm(num_clients, generator=torch.Generator().manual_seed(seed))
    return sorted(perm[:num].tolist())


def sample_clients(num_clients: int, per_round: int, round: int, seed: int) -> list[int]:  # noqa: A002
    """The clients of round `round` (0-based): pick_clients(..., seed * 100_003 + round)."""
    return pick_clients(num_clients, per_round, seed * 100_003 + round)


def client_seed(seed: int, round: int, client: int) -> int:  # noqa: A002
    """The seed of one client's local update in one round."""
    return (seed * 100_003 + round) * 10_007 + client


def client_batches(num_items: int, batch_size: int, epochs: int, seed: int) -> list[torch.Tensor]:
    """Per epoch e: randperm(num_items, manual_seed(seed * 100_003 + e)).split(batch_size); the
    last partial batch is kept."""
    if batch_size < 1 or epochs < 0 or num_items < 0:
        raise ValueError(f"need batch_size >= 1, epochs >= 0, num_items >= 0; got {batch_size}, {epochs}, {num_items}")
    out: list[torch.Tensor] = []
    for e in range(epochs):
        gen = torch.Generator().manual_seed(seed * 100_003 + e)
        out += list(torch.randperm(num_items, generator=gen).split(batch_size))
    return out
