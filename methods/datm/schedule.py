"""DATM's difficulty-aligned window: the start epoch of each matched expert segment
(official distill/DATM.py: `Upper_Bound`, `np.random.randint(min_start_epoch, Upper_Bound)`)."""
from __future__ import annotations

import torch


def start_epoch_bound(iteration: int, min_start: int, max_start: int, current_max_start: int | None = None,
                      expansion_end: int | None = None) -> int:
    """U_it = min(max_start, cur_max + floor((max_start - cur_max) * it / expansion_end)) under
    sequential generation (current_max_start and expansion_end given), else max_start."""
    if min_start >= max_start:
        raise ValueError(f"min_start ({min_start}) must be below max_start ({max_start})")
    if min_start < 0 or iteration < 0:
        raise ValueError(f"min_start and iteration must be >= 0, got {min_start}, {iteration}")
    if current_max_start is None or expansion_end is None:
        return int(max_start)
    if not min_start < current_max_start <= max_start:
        raise ValueError(f"current_max_start ({current_max_start}) must lie in ({min_start}, {max_start}]")
    if expansion_end < 1:
        raise ValueError(f"expansion_end must be >= 1, got {expansion_end}")
    grow = ((max_start - current_max_start) * iteration) // expansion_end
    return int(min(max_start, current_max_start + grow))


def sample_start_epoch(iteration: int, generator: torch.Generator | None, min_start: int, max_start: int,
                       current_max_start: int | None = None, expansion_end: int | None = None) -> int:
    """t uniform in [min_start, U_it) (upper bound exclusive, as np.random.randint)."""
    upper = start_epoch_bound(iteration, min_start, max_start, current_max_start, expansion_end)
    return int(torch.randint(min_start, upper, (1,), generator=generator))
