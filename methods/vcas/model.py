"""Exact training, VCAS and the two sample-dropping baselines (UB, SB) behind one training_step.

`net` maps a batch's inputs (an image tensor, or a dict of token tensors) to logits; `blocks`
are its repeated blocks, sampled in VCAS mode. Every mode tallies the matrix-multiply FLOPs of
everything it runs (methods/vcas/flops.py), so `flops_reduction` compares total training cost
with exact training's on the same steps.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from common.kernels import IMPLS
from methods.vcas.controller import VarianceController
from methods.vcas.flops import forward_backward_flops, official_flops_ratio
from methods.vcas.sampling import SampledLinear, install

MODES = ("exact", "vcas", "ub", "sb")


def take(inputs, idx):
    """Rows `idx` of an input tensor or of every tensor of a dict of inputs."""
    return {k: v[idx] for k, v in inputs.items()} if isinstance(inputs, dict) else inputs[idx]


class Sampled(nn.Module):
    """mode: exact (plain autograd) | vcas | ub (upper-bound importance sampling of samples) | sb
    (selective backprop: the samples with the largest loss). UB and SB train on as many samples
    as spend `budget` × exact training's FLOPs, their selection forward included.
    kernels (hardware.kernels): "reference" | "triton" | "auto"; VCAS mode computes SampleW's
    ∇W on common/kernels/sampled_linear where it resolves to Triton."""

    def __init__(self, net: nn.Module, blocks: nn.Module, mode: str = "vcas", every: int = 100, m: int = 2,
                 act_var_tau: float = 0.025, w_var_tau: float = 0.025, s_step: float = 0.01,
                 w_ratio_mul: float = 0.95, nu_min: float = 0.05, sched_decay: float = 0.6, budget: float = 0.6,
                 kernels: str = "reference"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got '{mode}'")
        if not 0 < budget <= 1:
            raise ValueError(f"budget must be in (0, 1], got {budget}")
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        if kernels not in IMPLS:
            raise ValueError(f"kernels must be one of {IMPLS}, got '{kernels}'")
        self.net, self.mode, self.every, self.m, self.budget = net, mode, every, m, budget
        self.num_blocks = len(blocks)
        self.state, self.controller = None, None
        if mode == "vcas":
            self.state = install(blocks, kernels=kernels)
            self.controller = VarianceController(self.state, act_var_tau, w_var_tau, s_step, w_ratio_mul, m,
                                                 nu_min, sched_decay)
        self.linears = [mod for mod in blocks.modules() if isinstance(mod, SampledLinear)]
        num_linears = len(self.linears)
        # the controller's minibatches (step -> m batches of (inputs, labels)), set by run()
        self.controller_batches: Callable[[int], list] | None = None
        self.ctl_logs: dict[str, float] = {}
        # controller state and FLOPs tallies are buffers, so a checkpoint resumes them exactly
        self.register_buffer("rho", torch.ones(self.num_blocks, dtype=torch.float64))
        self.register_buffer("nu", torch.ones(num_linears, dtype=torch.float64))
        self.register_buffer("s", torch.ones((), dtype=torch.float64))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        # per sample: exact forward F, backward B, and the controller's exact backward B_ctl
        self.register_buffer("per_sample", torch.zeros(3, dtype=torch.float64))
        # FLOPs spent, FLOPs exact training would spend; official units: Σ ratio, updates
        self.register_buffer("flops", torch.zeros(2, dtype=torch.float64))
        self.register_buffer("skipped", torch.zeros((), dtype=torch.float64))   # by sampled backwards
        self.register_buffer("official", torch.zeros(2, dtype=torch.float64))

    def forward(self, inputs) -> torch.Tensor:
        return self.net(inputs)

    def loss(self, batch, reduction: str = "mean") -> torch.Tensor:
        inputs, labels = batch
        return F.cross_entropy(self.net(inputs), labels, reduction=reduction)

    # --- one training step -------------------------------------------------------------
    def training_step(self, batch):
        n = len(batch[1])
        if not self.per_sample.any():
            self._measure_flops(batch)
        fwd, bwd, bwd_ctl = self.per_sample.tolist()
        if self.mode == "exact":
            loss, spent, logs = self.loss(batch), n * (fwd + bwd), {}
        elif self.mode == "vcas":
            loss, spent, logs = self._vcas_step(batch, fwd, bwd, bwd_ctl)
        else:
            loss, spent, logs = self._drop_step(batch, fwd, bwd)
        self.steps += 1
        self.flops += torch.tensor([spent, n * (fwd + bwd)], dtype=torch.float64, device=self.flops.device)
        return loss, logs

    def _measure_flops(self, batch) -> None:
        """Per sample, on two samples (products scale with N): exact forward F and backward B
        (plain autograd, all parameters), and the controller's exact backward B_ctl (through the
        sampled layers with sampling off, gradients of the block linears' weights only)."""
        inputs, labels = batch
        k = min(2, len(labels))
        idx = torch.arange(k, device=labels.device)

        def loss():
            return self.loss((take(inputs, idx), labels[idx]))

        st = self.state
        if st is None:
            fwd, bwd = forward_backward_flops(loss, [p for p in self.parameters() if p.requires_grad])
            self.per_sample.copy_(torch.tensor([fwd / k, bwd / k, 0.0]))
            return
        saved = (st.active, st.sample_act, st.sample_w, st.record, st.measure_w)
        try:
            st.active = False
            fwd, bwd = forward_backward_flops(loss, [p for p in self.parameters() if p.requires_grad])
            st.active, st.sample_act, st.sample_w, st.record, st.measure_w = True, False, False, False, False
            _, bwd_ctl = forward_backward_flops(loss, [lin.weight for lin in self.linears])
        finally:
            st.active, st.sample_act, st.sample_w, st.record, st.measure_w = saved
        self.per_sample.copy_(torch.tensor([fwd / k, bwd / k, bwd_ctl / k]))

    def _vcas_step(self, batch, fwd: float, bwd: float, bwd_ctl: float):
        st, ctl, m = self.state, self.controller, self.m
        ctl.s, st.rho, st.nu = float(self.s), self.rho.tolist(), self.nu.tolist()
        st.skipped_flops = self.skipped   # the backwards add what they skip, also after this returns
        spent = 0.0
        if (int(self.steps) + 1) % self.every == 0 and self.controller_batches is not None:
            self.official += torch.tensor([official_flops_ratio(st.rho, self.block_mean_nu(), self.every, m), 1.0],
                                          dtype=torch.float64, device=self.official.device)
            batches = self.controller_batches(int(self.steps))
            self.ctl_logs = ctl.step(self.loss, batches, [lin.weight for lin in self.linears])
            n = len(batches[0][1])
            spent = n * (m * fwd + (m + m * m) * bwd_ctl)   # m forwards, m exact and m² SampleA backwards
            self.s.fill_(ctl.s)
            self.rho.copy_(torch.tensor(st.rho))
            self.nu.copy_(torch.tensor(st.nu))
        st.sample_act, st.sample_w, st.record, st.measure_w = True, True, False, False
        logs = {**self.ctl_logs, "rho_mean": sum(st.rho) / len(st.rho), "nu_mean": sum(st.nu) / max(len(st.nu), 1)}
        return self.loss(batch), spent + len(batch[1]) * (fwd + bwd), logs

    def block_mean_nu(self) -> list[float]:
        """ν averaged over each block's linear layers (the official bookkeeping's ν̄_l)."""
        sums, counts = [0.0] * self.num_blocks, [0] * self.num_blocks
        for lin in self.linears:
            sums[lin.block] += float(self.nu[lin.index])
            counts[lin.block] += 1
        return [s / max(c, 1) for s, c in zip(sums, counts)]

    def _drop_step(self, batch, fwd: float, bwd: float):
        """Both baselines forward the whole batch without a graph, then train on k of its N
        samples: N·F + k·(F + B) FLOPs, so k/N = budget − F/(F + B).
        UB (Katharopoulos & Fleuret, 2018): k draws with replacement, p_i ∝ ‖softmax(z_i) − e_{y_i}‖
        (the gradient norm at the logits, their upper bound), each loss weighted 1/(N·p_i): unbiased.
        SB (selective backprop, Jiang et al., 2019): the k samples with the largest loss: biased."""
        inputs, labels = batch
        n = len(labels)
        keep = self.budget - fwd / (fwd + bwd)
        if keep <= 0:
            raise ValueError(f"budget {self.budget} does not cover the selection forward of {self.mode.upper()} "
                             f"({fwd / (fwd + bwd):.3f} of a step)")
        k = max(1, round(n * keep))
        with torch.no_grad():
            logits = self.net(inputs)                                    # (N, classes)
            per_sample = F.cross_entropy(logits, labels, reduction="none")
        if self.mode == "ub":
            bound = (logits.softmax(-1) - F.one_hot(labels, logits.shape[-1])).norm(dim=1)
            p = bound / bound.sum()
            idx = torch.multinomial(p, k, replacement=True)
            loss = (self.loss((take(inputs, idx), labels[idx]), reduction="none") / (n * p[idx])).mean()
        else:
            idx = per_sample.topk(k).indices
            loss = self.loss((take(inputs, idx), labels[idx]))
        # logged as "loss" (it overrides the trainer's value): the whole batch's loss, free here
        return loss, n * fwd + k * (fwd + bwd), {"loss": per_sample.mean()}

    def flops_reduction(self) -> dict[str, float]:
        """Percent of exact training's FLOPs saved, everything counted; and by the official bookkeeping."""
        spent, exact = self.flops.tolist()
        out = {"flops_reduction": 100 * (1 - (spent - float(self.skipped)) / max(exact, 1.0))}
        if self.mode == "vcas":
            total, updates = self.official.tolist()
            out["flops_reduction_official"] = 100 * (1 - total / updates) if updates else 0.0
        return out
