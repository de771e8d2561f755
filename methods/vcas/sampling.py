"""The two unbiased samplers of VCAS, placed in the backward of the ordinary forward graph.

SampleA (`_SampleA`, an identity at the output of every block l): in the backward it keeps
sample i's output gradient G_i with probability p_i ∝ ‖G_i‖ (water-filling, Σ p_i = ρ_l·N) and
scales it by 1/p_i. The indices of the kept samples go into the shared `SamplingState`; every
linear layer of the block then computes its input and weight gradients on those rows only
(`index_select`), writing zeros for the dropped rows, as the official code does
(vcas/layers/linear.py). The other ops of the block (attention products, norms, GELU) run on
the whole batch, whose dropped rows are exactly zero. Going down, a block whose ρ equals the
one above passes the gradient through and keeps the indices (official act_sampler.py); a
smaller ρ resamples among the survivors. Nothing is recomputed: the forward graph is the
exact one, so at ρ = ν = 1 a step costs what exact training costs.

SampleW (in the same linear backward): ∇X stays exact on the kept rows; ∇W sums a
leverage-sampled subset of those rows, q_r ∝ ‖∇Z_r‖·‖X_r‖ with Σ q_r = ν_j·rows, each
scaled by 1/q_r (`sampled_weight_grad`). Where `SamplingState.kernels` (hardware.kernels)
resolves to Triton, common/kernels/sampled_linear computes the same sum in one GEMM that
gathers the kept rows and applies 1/q_r while loading its tiles (no gathered copies).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from common.kernels import IMPLS, resolve_impl
from common.kernels.sampled_linear import sampled_weight_grad as gathered_weight_grad


def water_fill(weights: torch.Tensor, budget: float) -> torch.Tensor:
    """Probabilities p_i = min(1, c·w_i) with Σ p_i = budget (the largest weights saturate at 1).

    Zero weights get p = 0; if the budget covers every non-zero weight they all get p = 1.
    When c = budget/Σw saturates nothing that is the answer; otherwise one sort: with the k
    largest saturated, c_k = (budget − k)/Σ_{i ≥ k} ws_i, and the first k whose next weight
    stays ≤ 1 is the answer (official `soft_topk`, with exact zeros)."""
    w = weights.float()
    positive = w > 0
    if budget >= int(positive.sum()):
        return positive.to(w.dtype)
    p = w * (budget / w.sum())
    if float(p.max()) <= 1:
        return p
    ws = w.sort(descending=True).values
    k = torch.arange(len(ws), device=w.device, dtype=w.dtype)
    tail = ws.flip(0).cumsum(0).flip(0)                        # Σ_{i ≥ k} ws_i, smallest first (no cancellation)
    c = (budget - k) / tail.clamp_min(torch.finfo(w.dtype).tiny)
    first = ((c * ws <= 1 + 1e-6) & (k < budget)).int().argmax()
    return (c[first] * w).clamp_(max=1)


def keep_fraction(norms: torch.Tensor, share: float) -> float:
    """p_j(s): the smallest fraction of samples whose norms add up to `share` of the total
    (official `find_top_sum`)."""
    ns = norms.float().sort(descending=True).values
    total = float(ns.sum())
    if total == 0 or share >= 1:
        return 1.0 if share >= 1 else 0.0
    count = int((ns.cumsum(0) < share * total).sum()) + 1
    return min(count, len(ns)) / len(ns)


def sampled_weight_grad(grad_rows: torch.Tensor, input_rows: torch.Tensor, inv_prob: torch.Tensor) -> torch.Tensor:
    """∇W ≈ Σ_r (1/q_r) ∇Z_rᵀ X_r over the kept rows r.

    grad_rows (k, out), input_rows (k, in), inv_prob (k,) -> (out, in). The one place a fused
    gather-scale-matmul kernel (common/kernels) drops in."""
    scale = inv_prob.to(grad_rows.dtype).unsqueeze(1)
    if grad_rows.shape[1] <= input_rows.shape[1]:       # scale the narrower operand
        return (grad_rows * scale).t() @ input_rows
    return grad_rows.t() @ (input_rows * scale)


@dataclass
class SamplingState:
    """What the sampled layers read (ratios, switches) and write (kept rows, statistics, FLOPs)."""
    num_blocks: int
    num_linears: int = 0
    rho: list[float] = field(default_factory=list)       # SampleA keep ratio per block
    nu: list[float] = field(default_factory=list)        # SampleW keep ratio per linear layer
    active: bool = True        # off: every wrapped layer is a plain layer (evaluation, FLOPs measurement)
    sample_act: bool = True
    sample_w: bool = True
    record: bool = False       # controller's exact passes: keep each block's output-gradient norms
    measure_w: bool = False    # controller's SampleA passes: add SampleW's analytic variance to w_var
    generator: torch.Generator | None = None
    fuse: bool = True          # timm blocks on CPU: the whole block backward on the kept rows (block.py)
    kernels: str = "reference"  # hardware.kernels: SampleW's ∇W on the Triton kernel where it resolves to Triton
    kept: torch.Tensor | None = None   # samples whose gradient survives below the last SampleA (None: all)
    norms: dict[int, list[torch.Tensor]] = field(default_factory=dict)   # per block, one per recorded pass
    w_var: list[float] = field(default_factory=list)     # per linear: Σ_r (1/q_r − 1)‖∇Z_r‖²‖X_r‖²
    skipped_flops: float = 0.0  # matmul FLOPs the linear backwards did not run, against exact

    def __post_init__(self):
        if self.kernels not in IMPLS:
            raise ValueError(f"kernels must be one of {IMPLS}, got '{self.kernels}'")
        self.rho = list(self.rho) or [1.0] * self.num_blocks
        self.nu = list(self.nu) or [1.0] * self.num_linears
        self.reset_stats()

    def reset_stats(self) -> None:
        self.norms = {l: [] for l in range(self.num_blocks)}
        self.w_var = [0.0] * self.num_linears

    def bernoulli(self, p: torch.Tensor) -> torch.Tensor:
        return torch.rand(p.shape, generator=self.generator, device=p.device) < p


class _SampleA(torch.autograd.Function):
    """Identity forward; the backward samples whole samples of the block's output gradient."""

    @staticmethod
    def forward(ctx, y, state, block):
        ctx.state, ctx.block = state, block
        return y.view_as(y)

    @staticmethod
    def backward(ctx, gy):
        return sample_act(ctx.state, ctx.block, gy), None, None


def sample_act(st: SamplingState, l: int, gy: torch.Tensor) -> torch.Tensor:
    """SampleA on block l's output gradient gy (N, ...): records its norms on controller passes,
    keeps sample i with probability p_i ∝ ‖gy_i‖ (Σ p = ρ_l·N, among the survivors of the blocks
    above), writes the kept indices into `st.kept` and returns gy with kept samples scaled by
    1/p_i and dropped ones zero; where ρ_l = ρ_{l+1} (or 1, or sampling is off) gy passes through."""
    n = gy.shape[0]
    if st.record:
        st.norms[l].append(gy.detach().reshape(n, -1).norm(dim=1))
    top = l == st.num_blocks - 1
    if top:
        st.kept = None                 # a new backward pass starts with every sample
    if not st.sample_act or st.rho[l] >= 1 or (not top and st.rho[l] >= st.rho[l + 1]):
        return gy                      # nothing dropped here; the kept rows stay as they are
    p = water_fill(gy.detach().reshape(n, -1).norm(dim=1), st.rho[l] * n)
    idx = st.bernoulli(p).nonzero().squeeze(1)
    st.kept = idx
    scale = torch.zeros(n, device=gy.device, dtype=gy.dtype)
    scale[idx] = 1 / p[idx].to(gy.dtype)
    return gy * scale.view(-1, *[1] * (gy.dim() - 1))


def weight_grad(st: SamplingState, j: int, gz2: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, int]:
    """SampleW for linear j: ∇W = Σ_r ∇Z_rᵀ X_r / q_r over rows drawn with q_r ∝ ‖∇Z_r‖·‖X_r‖,
    Σ q = ν_j·rows (exact where ν_j = 1 or sampling is off); on controller SampleA passes also
    adds the analytic variance to `st.w_var[j]`. gz2 (rows, out), x2 (rows, in) -> (∇W, rows used)."""
    rows, nu = gz2.shape[0], st.nu[j]
    if not ((st.sample_w or st.measure_w) and nu < 1 and rows):
        return gz2.t() @ x2, rows
    score = torch.linalg.vector_norm(gz2, dim=1) * torch.linalg.vector_norm(x2, dim=1)
    q = water_fill(score, nu * rows)
    if st.measure_w:
        on = q > 0
        st.w_var[j] += float(((1 / q[on] - 1) * score[on].double().pow(2)).sum())
    if not st.sample_w:
        return gz2.t() @ x2, rows
    r = st.bernoulli(q).nonzero().squeeze(1)
    if resolve_impl(st.kernels, gz2.device) == "triton":   # gathers and rescales inside the GEMM
        return gathered_weight_grad(gz2, x2, r, q, impl="triton"), len(r)
    return sampled_weight_grad(gz2.index_select(0, r), x2.index_select(0, r), 1 / q[r]), len(r)


class _SampledLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, state, index):
        ctx.state, ctx.index, ctx.has_bias = state, index, bias is not None
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, gz):
        x, weight = ctx.saved_tensors
        st, j = ctx.state, ctx.index
        out_f, in_f = weight.shape
        rows_all = gz.numel() // out_f
        kept = st.kept
        if kept is not None:               # (N, ..., d) -> the kept samples' rows only
            gz, xk = gz.index_select(0, kept), x.index_select(0, kept)
        else:
            xk = x
        gz2, x2 = gz.reshape(-1, out_f), xk.reshape(-1, in_f)
        rows = gz2.shape[0]
        gx = None
        if ctx.needs_input_grad[0]:
            gxk = (gz2 @ weight).view(xk.shape)
            gx = gxk if kept is None else x.new_zeros(x.shape).index_copy_(0, kept, gxk)
        gw, w_rows = None, rows
        if ctx.needs_input_grad[1]:
            gw, w_rows = weight_grad(st, j, gz2, x2)
        gb = gz2.sum(0) if ctx.has_bias else None   # dropped rows are zero: the kept rows give the sum
        skipped = (rows_all - rows if gx is not None else 0) + (rows_all - w_rows if gw is not None else 0)
        st.skipped_flops += 2.0 * in_f * out_f * skipped
        return gx, gw, gb, None, None


class SampledLinear(nn.Linear):
    """nn.Linear whose backward reads the kept samples (SampleA) and samples the rows of its
    weight gradient (SampleW); a plain nn.Linear while `state.active` is off."""
    state: SamplingState | None = None
    index: int = 0     # which ν (linear layers numbered in block order)
    block: int = 0

    def forward(self, x):
        st = self.state
        if st is None or not st.active or not torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        return _SampledLinearFn.apply(x, self.weight, self.bias, st, self.index)


class SampledBlock(nn.Module):
    """One repeated block followed by SampleA on its output (its first output when it returns a
    tuple, as Hugging Face layers do). Samples are the first dimension of every activation."""

    def __init__(self, block: nn.Module, state: SamplingState, index: int):
        super().__init__()
        from methods.vcas.block import fusable, fused_block   # block.py imports this module
        self.block, self.state, self.index = block, state, index
        self.fused = fused_block if fusable(block) else None

    def forward(self, x, *args, **kwargs):
        st = self.state
        if not (st.active and torch.is_grad_enabled()):
            return self.block(x, *args, **kwargs)
        if st.fuse and self.fused is not None and not args and not kwargs and x.device.type == "cpu":
            return self.fused(self.block, x, st, self.index)   # the whole backward on the kept rows
        out = self.block(x, *args, **kwargs)
        if isinstance(out, tuple):
            return (_SampleA.apply(out[0], self.state, self.index), *out[1:])
        return _SampleA.apply(out, self.state, self.index)


def install(blocks: nn.ModuleList | nn.Sequential, generator: torch.Generator | None = None,
            kernels: str = "reference") -> SamplingState:
    """Wrap every block in place, turn the nn.Linear layers inside into SampledLinear (one ν
    each, numbered in block order), and return the state they share. kernels: SampleW's ∇W
    implementation ("reference" | "triton" | "auto", common.kernels.resolve_impl)."""
    linears = [[m for m in block.modules() if type(m) is nn.Linear] for block in blocks]
    state = SamplingState(len(blocks), sum(map(len, linears)), generator=generator, kernels=kernels)
    j = 0
    for l, block in enumerate(list(blocks)):
        for mod in linears[l]:
            mod.__class__ = SampledLinear
            mod.state, mod.index, mod.block = state, j, l
            j += 1
        blocks[l] = SampledBlock(block, state, l)
    return state
