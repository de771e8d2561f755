"""The SimCLR projection head."""
from __future__ import annotations

from torch import nn


class Projector(nn.Sequential):
    """Linear(in -> hidden, no bias) -> BatchNorm -> ReLU -> Linear(hidden -> out)."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int):
        super().__init__(nn.Linear(in_dim, hidden_dim, bias=False), nn.BatchNorm1d(hidden_dim),
                         nn.ReLU(inplace=True), nn.Linear(hidden_dim, out_dim))
