"""Frozen-feature extraction in batches."""
from __future__ import annotations

import torch


@torch.no_grad()
def extract(fn, inputs: torch.Tensor, batch_size: int, device="cpu") -> torch.Tensor:
    """Apply `fn` (e.g. uint8 images -> features) in batches; float results on the CPU."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    outs = [fn(inputs[i:i + batch_size].to(device)).float().cpu() for i in range(0, len(inputs), batch_size)]
    return torch.cat(outs) if outs else torch.empty(0)
