"""The cluster head trained on frozen features, and the memory of recent logits that the
pseudo-labels are solved over."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CosineHead(nn.Module):
    """logits = s · cos(x, w_k): unit-norm prototypes w_k (K, D), logit scale s (the official
    head: a weight-normalised linear layer with its gain frozen at 1, s = 10)."""

    def __init__(self, in_dim: int, num_clusters: int, logit_scale: float = 10.0):
        super().__init__()
        self.logit_scale = logit_scale
        self.prototypes = nn.Parameter(torch.empty(num_clusters, in_dim))
        nn.init.kaiming_uniform_(self.prototypes, a=5 ** 0.5)  # nn.Linear's init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D) -> logits (B, K) in [−s, s]."""
        return self.logit_scale * F.normalize(x, dim=1) @ F.normalize(self.prototypes, dim=1).T


class ClusterHead(nn.Module):
    """Frozen-encoder features (B, in_dim) -> MLP -> cosine head -> logits (B, K).

    The MLP stands in for the part of the backbone the paper fine-tunes (DINO ViT-B/16's last
    block); hidden_dim = 0 leaves only the cosine head."""

    def __init__(self, in_dim: int, num_clusters: int, hidden_dim: int = 256, out_dim: int = 128,
                 logit_scale: float = 10.0):
        super().__init__()
        if hidden_dim > 0:
            self.mlp = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.BatchNorm1d(hidden_dim),
                                     nn.ReLU(inplace=True), nn.Linear(hidden_dim, out_dim))
        else:
            self.mlp, out_dim = nn.Identity(), in_dim
        self.head = CosineHead(out_dim, num_clusters, logit_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mlp(x))


class LogitsMemory(nn.Module):
    """A ring buffer of the last `size` logits (size, K): each step solves the transport over
    the whole memory and keeps the rows of the current batch, so the cluster-size prior acts
    on many batches, not one. A buffer, so that checkpoints carry it."""

    def __init__(self, num_clusters: int, size: int):
        super().__init__()
        if size < 1:
            raise ValueError(f"memory size must be >= 1, got {size}")
        self.register_buffer("logits", torch.zeros(size, num_clusters))
        self.register_buffer("next_row", torch.zeros((), dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def push(self, logits: torch.Tensor) -> torch.Tensor:
        """Write a batch (B, K) over the oldest rows; return the rows it went to (B,)."""
        size = self.logits.shape[0]
        if logits.shape[0] > size:
            raise ValueError(f"a batch of {logits.shape[0]} does not fit a memory of {size}")
        rows = (self.next_row + torch.arange(logits.shape[0], device=self.logits.device)) % size
        self.logits[rows] = logits.detach().to(self.logits.dtype)
        self.next_row.copy_((self.next_row + logits.shape[0]) % size)
        self.filled.copy_(torch.clamp(self.filled + logits.shape[0], max=size))
        return rows

    @torch.no_grad()
    def overwrite(self, rows: torch.Tensor, logits: torch.Tensor) -> None:
        """Put another view's logits (B, K) in the rows of the batch just pushed (the official
        code's second view replaces the first one's slots)."""
        self.logits[rows] = logits.detach().to(self.logits.dtype)

    def contents(self) -> torch.Tensor:
        """The filled rows (M, K), M <= size; row numbers are those `push` returned."""
        return self.logits[: int(self.filled)]
