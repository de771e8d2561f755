"""The binary RBM of Stacked Tempering (issue #53, "Algorithm"): v in {0,1}^N, h in {0,1}^M,

    E(v, h) = -a.v - b.h - v W h
    F_v(v)  = -a.v - sum_mu softplus(b_mu + (v W)_mu)        (h summed out)
    F_h(h)  = -b.h - sum_i softplus(a_i + (W h)_i)            (v summed out)
    p(h = 1 | v) = sigmoid(b + v W),   p(v = 1 | h) = sigmoid(a + W h).

At inverse temperature beta (parallel tempering's replicas) the law is exp(-beta E) / Z_beta and the
conditionals are sigmoids of beta times the fields. Shapes: v (B, N), h (B, M), weight (N, M).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.functional import softplus


def check_binary(x: torch.Tensor, name: str) -> None:
    """ValueError unless every entry of `x` is 0 or 1."""
    if x.numel() and not bool(((x == 0) | (x == 1)).all()):
        raise ValueError(f"{name} must be binary (0/1) states, got values outside {{0, 1}}")


class BinaryRBM(nn.Module):
    """A Bernoulli-Bernoulli RBM; weights ~ N(0, init_std^2), zero biases (the official init)."""

    def __init__(self, num_visible: int, num_hidden: int, init_std: float = 0.01,
                 generator: torch.Generator | None = None):
        super().__init__()
        if num_visible < 1 or num_hidden < 1:
            raise ValueError(f"an RBM needs at least one visible and one hidden unit, got "
                             f"num_visible={num_visible}, num_hidden={num_hidden}")
        w = torch.randn(num_visible, num_hidden, generator=generator) * init_std
        self.weight = nn.Parameter(w)                                   # (N, M)
        self.visible_bias = nn.Parameter(torch.zeros(num_visible))      # a (N,)
        self.hidden_bias = nn.Parameter(torch.zeros(num_hidden))        # b (M,)

    @property
    def num_visible(self) -> int:
        return self.weight.shape[0]

    @property
    def num_hidden(self) -> int:
        return self.weight.shape[1]

    def _v(self, v: torch.Tensor) -> torch.Tensor:
        if v.shape[-1] != self.num_visible:
            raise ValueError(f"visible states have {v.shape[-1]} units, the RBM has {self.num_visible}")
        return v.to(self.weight.dtype)

    def _h(self, h: torch.Tensor) -> torch.Tensor:
        if h.shape[-1] != self.num_hidden:
            raise ValueError(f"hidden states have {h.shape[-1]} units, the RBM has {self.num_hidden}")
        return h.to(self.weight.dtype)

    def energy(self, v: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """E(v, h) = -a.v - b.h - v W h: (B,)."""
        v, h = self._v(v), self._h(h)
        return -(v @ self.visible_bias) - (h @ self.hidden_bias) - ((v @ self.weight) * h).sum(-1)

    def free_energy_v(self, v: torch.Tensor) -> torch.Tensor:
        """F_v(v) = -a.v - sum_mu softplus(b + v W): (B,)."""
        v = self._v(v)
        return -(v @ self.visible_bias) - softplus(self.hidden_bias + v @ self.weight).sum(-1)

    def free_energy_h(self, h: torch.Tensor) -> torch.Tensor:
        """F_h(h) = -b.h - sum_i softplus(a + W h): (B,)."""
        h = self._h(h)
        return -(h @ self.hidden_bias) - softplus(self.visible_bias + h @ self.weight.T).sum(-1)

    def hidden_probs(self, v: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
        """p(h = 1 | v) = sigmoid(beta (b + v W)): (B, M)."""
        return torch.sigmoid(beta * (self.hidden_bias + self._v(v) @ self.weight))

    def visible_probs(self, h: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
        """p(v = 1 | h) = sigmoid(beta (a + W h)): (B, N)."""
        return torch.sigmoid(beta * (self.visible_bias + self._h(h) @ self.weight.T))

    def sample_h(self, v: torch.Tensor, generator: torch.Generator | None = None, beta: float = 1.0) -> torch.Tensor:
        """h ~ p(h | v): (B, M) of 0/1 floats."""
        p = self.hidden_probs(v, beta)
        return (torch.rand(p.shape, generator=generator, dtype=p.dtype) < p).to(p.dtype)

    def sample_v(self, h: torch.Tensor, generator: torch.Generator | None = None, beta: float = 1.0) -> torch.Tensor:
        """v ~ p(v | h): (B, N) of 0/1 floats."""
        p = self.visible_probs(h, beta)
        return (torch.rand(p.shape, generator=generator, dtype=p.dtype) < p).to(p.dtype)


def check_stack(rbms) -> None:
    """ValueError unless RBM l's hidden size equals RBM l+1's visible size for every l."""
    if len(rbms) < 1:
        raise ValueError("a stack needs at least one RBM")
    for i, (lower, upper) in enumerate(zip(rbms[:-1], rbms[1:])):
        if lower.num_hidden != upper.num_visible:
            raise ValueError(f"RBM {i} has {lower.num_hidden} hidden units but RBM {i + 1} has "
                             f"{upper.num_visible} visible units: a stack needs them equal")
