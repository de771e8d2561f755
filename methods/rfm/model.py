"""The vector field v_θ(t, x): an MLP on the manifold's features with time fed to every layer."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class TimeLinear(nn.Module):
    """W x + b + w · t: every layer sees time."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.time = nn.Linear(1, out_dim, bias=False)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.time(t)


class VectorField(nn.Module):
    """v_θ(t, x) = proju(x, MLP(features(x), t)), swish activations; output tangent at x.
    `project=False` leaves the output unconstrained (the Euclidean ablation while training)."""

    def __init__(self, manifold, hidden: int, layers: int, project: bool = True):
        super().__init__()
        self.manifold, self.project = manifold, project
        in_dim = manifold.features(torch.zeros(1, manifold.ambient_dim)).shape[-1]
        dims = [in_dim] + [hidden] * layers
        self.hidden = nn.ModuleList(TimeLinear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = TimeLinear(hidden, manifold.ambient_dim)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        t = t.reshape(-1, 1).to(x.dtype).expand(x.shape[0], 1)
        h = self.manifold.features(x)
        for layer in self.hidden:
            h = F.silu(layer(h, t))
        out = self.out(h, t)
        return self.manifold.proju(x, out) if self.project else out


class EMA:
    """Exponential moving average of a model's weights (decay 0.999 in the paper)."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for ema, p in zip(self.model.parameters(), model.parameters()):
            ema.lerp_(p, 1 - self.decay)
