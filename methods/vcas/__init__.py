"""VCAS: Variance-Controlled Adaptive Sampling for efficient back-propagation (ICLR 2024). See README.md."""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from common import data, tasks
from common.callbacks import Callback
from common.config import UserError
from common.eval import accuracy, predict
from methods.vcas.controller import VarianceController
from methods.vcas.flops import official_flops_ratio
from methods.vcas.model import MODES, Sampled, take
from methods.vcas.sampling import (SampledBlock, SampledLinear, SamplingState, install, keep_fraction,
                                   sampled_weight_grad, water_fill)


def build(cfg, kernels: str = "reference") -> Sampled:
    """The network inside the training mode (`method.model`), from the config alone: an image
    model (`method.backbone`), or with `method.glue` set a text model (`method.glue.backbone`);
    `run` passes `kernels` from `hardware.kernels` (SampleW's ∇W: reference | triton | auto)."""
    m = cfg.method
    if (m.glue is None) == (m.backbone is None):
        raise UserError("set exactly one of method.backbone (images) and method.glue (text)", exit_code=2)
    if m.glue is None:
        ds = cfg.dataset
        net = instantiate(m.backbone, img_size=ds.img_size, in_chans=ds.in_chans, num_classes=ds.num_classes)
    else:
        net = instantiate(m.glue.backbone)
    return instantiate(m.model, net=net, blocks=net.blocks, kernels=kernels)


class StepTimer(Callback):
    """Wall and CPU time per training step, from the end of step 1 (FLOPs measurement, warm-up)
    to the end of the last step: the controller's passes are in, evaluation is not."""

    def __init__(self):
        self.first = self.last = None
        self.steps = 0

    def after_step(self, trainer) -> None:
        if trainer.hw.device.type == "cuda":
            torch.cuda.synchronize()
        now = (time.perf_counter(), time.process_time())
        if self.first is None:
            self.first = now
        else:
            self.steps += 1
        self.last = now

    def metrics(self) -> dict[str, float]:
        if not self.steps:
            return {}
        return {"step_ms": 1e3 * (self.last[0] - self.first[0]) / self.steps,
                "step_cpu_ms": 1e3 * (self.last[1] - self.first[1]) / self.steps}


def run(cfg, ctx) -> dict[str, float]:
    """Train with `method.model.mode` (exact | vcas | ub | sb) for the same steps; report test
    accuracy, the final training loss on a fixed training subset, the FLOPs saved (everything
    counted) and, with `method.report_timing`, the time per step."""
    model = build(cfg, kernels=ctx.hw.kernels)
    if cfg.method.glue is None:
        splits = data.image_splits(cfg.dataset)
        train, test = splits["train"], splits["test"]
    else:
        splits = instantiate(cfg.method.glue.data)
        train, test = splits["train"], splits["test"]
    inputs, labels = train
    sampler = ctx.sampler(len(labels))

    def batch(step: int):
        idx = sampler(step)
        x = take(inputs, idx)
        x = {k: v.to(ctx.device) for k, v in x.items()} if isinstance(x, dict) else x.to(ctx.device)
        return x, labels[idx].to(ctx.device)

    # the controller's minibatches: batches of steps past the run's end, which it never trains on
    far, m = cfg.trainer.max_steps + 1, model.m
    model.controller_batches = lambda step: [batch(far + m * step + j) for j in range(m)]
    fit_set = take(inputs, torch.arange(min(cfg.dataset.eval_train_size, len(labels)))), \
        labels[: cfg.dataset.eval_train_size]
    timer = StepTimer()

    def evaluate(mdl) -> dict[str, float]:
        out = {"test_acc": accuracy(_logits(mdl, test[0], cfg.eval.batch_size, ctx.device), test[1])}
        out["train_loss"] = float(F.cross_entropy(_logits(mdl, fit_set[0], cfg.eval.batch_size, ctx.device),
                                                  fit_set[1]))
        out.update(mdl.flops_reduction())
        if cfg.method.report_timing:
            out.update(timer.metrics())
        if mdl.mode == "vcas":
            out.update({"final_s": float(mdl.s), "final_rho_mean": float(mdl.rho.mean()),
                        "final_nu_mean": float(mdl.nu.mean())})
        return out

    return tasks.fit_and_evaluate(ctx, model, batch, evaluate, callbacks=[timer])


def _logits(model, inputs, batch_size: int, device) -> torch.Tensor:
    if not isinstance(inputs, dict):
        return predict(model, inputs, batch_size, device)
    n = len(next(iter(inputs.values())))
    return torch.cat([model({k: v[i:i + batch_size].to(device) for k, v in inputs.items()}).cpu()
                      for i in range(0, n, batch_size)])


__all__ = ["MODES", "Sampled", "SampledBlock", "SampledLinear", "SamplingState", "StepTimer", "VarianceController",
           "build", "install", "keep_fraction", "official_flops_ratio", "run", "sampled_weight_grad", "water_fill"]
