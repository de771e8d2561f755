"""The two unbiased samplers of VCAS and the water-filling that sets their probabilities.

SampleA (activation gradients) wraps a whole transformer block. The forward runs the block
without a graph; the backward draws which samples keep their output gradient (keep prob.
p_i ∝ ‖G_i‖, rescaled by 1/p_i), then recomputes the block on the kept rows only and
back-propagates those. The dropped samples are never touched, so the saving is real (and
the block's activations are not stored either, as with activation checkpointing).

SampleW (weight gradients) replaces nn.Linear inside the blocks: the input gradient is
exact, the weight gradient sums only a leverage-sampled subset of the token rows,
q_i ∝ ‖∇Z_i‖·‖X_i‖, each rescaled by 1/q_i.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


def water_fill(weights: torch.Tensor, budget: float) -> torch.Tensor:
    """Probabilities p_i = min(1, c·w_i) with Σ p_i = budget (the largest weights saturate at 1).

    Zero weights get p = 0; if the budget covers every non-zero weight they all get p = 1.
    """
    w = weights.float()
    positive = w > 0
    n_pos = int(positive.sum())
    if budget >= n_pos:
        return positive.float()
    ws, order = w.sort(descending=True)
    suffix = ws.flip(0).cumsum(0).flip(0)                     # Σ_{i ≥ k} ws_i
    k = torch.arange(len(ws), device=w.device, dtype=w.dtype)
    c = (budget - k) / suffix.clamp_min(torch.finfo(w.dtype).tiny)
    # k items clamped to 1 is consistent when the next largest is not above 1 after scaling
    ok = (c * ws <= 1 + 1e-6) & (k < budget)
    kstar = int(ok.nonzero()[0])
    p_sorted = torch.where(k < kstar, torch.ones_like(ws), (c[kstar] * ws).clamp(max=1))
    return torch.empty_like(p_sorted).scatter_(0, order, p_sorted)


def keep_fraction(norms: torch.Tensor, share: float) -> float:
    """p_j(s): the smallest fraction of samples whose norms add up to `share` of the total."""
    ns = norms.float().sort(descending=True).values
    total = float(ns.sum())
    if total == 0 or share >= 1:
        return 1.0 if share >= 1 else 0.0
    count = int((ns.cumsum(0) < share * total).sum()) + 1
    return min(count, len(ns)) / len(ns)


@dataclass
class SamplingState:
    """What the sampled layers read (ratios, switches) and write (norms, kept counts, variance)."""
    num_blocks: int
    rho: list[float] = field(default_factory=list)       # SampleA keep ratio per block
    nu: list[float] = field(default_factory=list)        # SampleW keep ratio per block
    sample_act: bool = True
    sample_w: bool = True
    record: bool = False       # controller passes: keep output-gradient norms and SampleW's variance
    measure_w: bool = False    # route linears through SampleW (for its variance), exact weight gradient
    generator: torch.Generator | None = None
    norms: dict[int, list[torch.Tensor]] = field(default_factory=dict)   # per block, recorded passes
    w_var: list[float] = field(default_factory=list)     # Σ_i (1/q_i − 1)‖a_i‖²‖b_i‖² per block
    kept_act: list[float] = field(default_factory=list)  # kept samples / N, last backward

    def __post_init__(self):
        self.rho = self.rho or [1.0] * self.num_blocks
        self.nu = self.nu or [1.0] * self.num_blocks
        self.reset_stats()

    def reset_stats(self) -> None:
        self.norms = {l: [] for l in range(self.num_blocks)}
        self.w_var = [0.0] * self.num_blocks
        self.kept_act = [1.0] * self.num_blocks

    def bernoulli(self, p: torch.Tensor) -> torch.Tensor:
        return torch.rand(p.shape, generator=self.generator, device=p.device) < p


class _SampleA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, block_fn, state, layer, *params):
        ctx.block_fn, ctx.state, ctx.layer = block_fn, state, layer
        ctx.save_for_backward(x, *params)
        with torch.no_grad():
            return block_fn(x)

    @staticmethod
    def backward(ctx, gy):
        x, *params = ctx.saved_tensors
        state, layer = ctx.state, ctx.layer
        n = gy.shape[0]
        norms = gy.reshape(n, -1).norm(dim=1)
        if state.record:
            state.norms[layer].append(norms.detach())
        if state.sample_act:
            p = water_fill(norms, state.rho[layer] * n)
            idx = state.bernoulli(p).nonzero().squeeze(1)
            gk = gy[idx] / p[idx].to(gy.dtype).view(-1, *[1] * (gy.dim() - 1))
        else:
            idx, gk = torch.arange(n, device=gy.device), gy
        state.kept_act[layer] = len(idx) / n
        if len(idx) == 0:
            return (torch.zeros_like(x), None, None, None, *[torch.zeros_like(w) for w in params])
        xk = x[idx].detach().requires_grad_(ctx.needs_input_grad[0])
        with torch.enable_grad():
            yk = ctx.block_fn(xk, idx)
            inputs = ([xk] if xk.requires_grad else []) + list(params)
            grads = list(torch.autograd.grad(yk, inputs, gk, allow_unused=True))
        gx = None
        if xk.requires_grad:
            gx = x.new_zeros(x.shape).index_copy_(0, idx, grads.pop(0))
        return (gx, None, None, None, *grads)


class _SampleW(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, state, layer):
        ctx.state, ctx.layer, ctx.has_bias = state, layer, bias is not None
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, gz):
        x, weight = ctx.saved_tensors
        state, layer = ctx.state, ctx.layer
        gz2, x2 = gz.reshape(-1, gz.shape[-1]), x.reshape(-1, x.shape[-1])
        gx = (gz2 @ weight).view(x.shape) if ctx.needs_input_grad[0] else None
        a2, b2 = gz2.float().pow(2).sum(1), x2.float().pow(2).sum(1)
        q = water_fill((a2 * b2).sqrt(), state.nu[layer] * len(gz2))
        if state.record:
            kept = q > 0
            state.w_var[layer] += float(((1 / q[kept] - 1) * a2[kept] * b2[kept]).sum())
        if state.sample_w:
            rows = state.bernoulli(q).nonzero().squeeze(1)
            gw = (gz2[rows] / q[rows].to(gz.dtype).unsqueeze(1)).t() @ x2[rows]
        else:
            gw = gz2.t() @ x2
        gb = gz2.sum(0) if ctx.has_bias else None
        return gx, gw, gb, None, None


class SampledLinear(nn.Linear):
    """nn.Linear whose weight gradient is SampleW'd while `state.sample_w` is on
    (`state.measure_w` with `state.record` only records the variance SampleW would add)."""
    state: SamplingState | None = None
    layer: int = 0

    def forward(self, x):
        st = self.state
        if st is None or not (st.sample_w or st.measure_w) or not torch.is_grad_enabled() or not self.weight.requires_grad:
            return F.linear(x, self.weight, self.bias)
        return _SampleW.apply(x, self.weight, self.bias, st, self.layer)


class SampledBlock(nn.Module):
    """Wraps one repeated block (the hidden state is its first input and first output).

    Other inputs (attention masks, ...) must not need gradients; those with one row per sample
    are cut to the kept rows for the recomputation. A tuple output keeps its other elements.
    """

    def __init__(self, block: nn.Module, state: SamplingState, layer: int):
        super().__init__()
        self.block, self.state, self.layer = block, state, layer

    def forward(self, x, *args, **kwargs):
        if not (self.training and torch.is_grad_enabled()):
            return self.block(x, *args, **kwargs)
        rest, n = [], x.shape[0]

        def cut(v, idx):
            return v[idx] if idx is not None and torch.is_tensor(v) and v.dim() and v.shape[0] == n else v

        def block_fn(h, idx=None):
            out = self.block(h, *[cut(a, idx) for a in args], **{k: cut(v, idx) for k, v in kwargs.items()})
            if isinstance(out, tuple):
                if idx is None:
                    rest[:] = out[1:]
                return out[0]
            return out

        params = [p for p in self.block.parameters() if p.requires_grad]
        y = _SampleA.apply(x, block_fn, self.state, self.layer, *params)
        return (y, *rest) if rest else y


def install(blocks: nn.ModuleList | nn.Sequential, state: SamplingState) -> None:
    """Wrap every block in place and turn the nn.Linear layers inside into SampledLinear."""
    for l, block in enumerate(list(blocks)):
        for mod in block.modules():
            if type(mod) is nn.Linear:
                mod.__class__ = SampledLinear
                mod.state, mod.layer = state, l
        blocks[l] = SampledBlock(block, state, l)
