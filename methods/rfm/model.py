"""The vector field v_θ(t, x): an MLP on the manifold's features with time fed to every layer."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel


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


def ema(model: nn.Module, decay: float) -> AveragedModel:
    """Exponential moving average of a model's weights, decay 0.999 in the paper, warmed up as in
    the official code: the decay at update n is min(decay, (1 + n) / (10 + n)). Without the
    warm-up, 0.999 keeps 0.999^2000 = 13.5% of the random initial weights after 2000 steps, which
    cost 0.7 nats of volcano test NLL at the mini tier (README, Results)."""
    def avg_fn(averaged: torch.Tensor, current: torch.Tensor, num_averaged) -> torch.Tensor:
        n = float(num_averaged)
        return averaged.lerp(current, 1.0 - min(decay, (1.0 + n) / (10.0 + n)))

    averaged = AveragedModel(model, avg_fn=avg_fn).eval()
    averaged.requires_grad_(False)  # never handed to the optimiser
    return averaged
