"""VCAS: Variance-Controlled Adaptive Sampling for efficient back-propagation (ICLR 2024). See README.md."""
from __future__ import annotations

import torch

from common import data, runner
from common.trainer import Trainer
from methods.vcas.controller import VarianceController
from methods.vcas.model import MODES, Sampled, ViTClassifier, labels_of, take, to_device
from methods.vcas.sampling import SampledBlock, SampledLinear, SamplingState, install, keep_fraction, water_fill


@torch.no_grad()
def evaluate(model: Sampled, split, batch_size: int, device) -> dict[str, float]:
    """Mean cross-entropy and accuracy (%) of `model` on a tuple/dict split, in eval mode."""
    was = model.training
    model.eval()
    n = len(labels_of(split))
    loss = correct = 0.0
    for i in range(0, n, batch_size):
        idx = torch.arange(i, min(i + batch_size, n))
        b = to_device(take(split, idx), device)
        logits = model(b)
        loss += float(torch.nn.functional.cross_entropy(logits, labels_of(b), reduction="sum"))
        correct += float((logits.argmax(1) == labels_of(b)).sum())
    model.train(was)
    return {"loss": loss / n, "acc": 100 * correct / n}


def run(cfg) -> dict[str, float]:
    """Train with `method.mode` (exact | vcas | ub | sb) for the same steps; report the final
    training loss (on a fixed training subset), test accuracy and the FLOPs saved."""
    from methods.vcas.tasks import build

    ctx = runner.start(cfg)
    net, blocks, train, evals = build(cfg)
    model = Sampled(net, blocks, cfg.method).to(ctx.hw.device)
    n = len(labels_of(train))
    sampler = data.StepSampler(n, cfg.trainer.batch_size, cfg.seed, ctx.hw.rank, ctx.hw.world_size)

    def batch(step: int):
        return to_device(take(train, sampler(step)), ctx.hw.device)

    # the controller's minibatches: batches of steps the run never trains on
    far = cfg.trainer.max_steps + 1
    model.probe_fn = lambda step: [batch(far + cfg.method.m * step + j) for j in range(cfg.method.m)]
    trainer = Trainer(model, cfg.trainer, ctx.hw, ctx.run_dir, ctx.logger, batch_fn=batch)
    trainer.fit(resume=cfg.resume)
    metrics = dict(model.flops_reduction())
    for name, split in evals.items():
        ev = evaluate(model, split, 512, ctx.hw.device)
        key = "train" if name == "train_eval" else name
        metrics[f"{key}_loss"], metrics[f"{key}_acc"] = ev["loss"], ev["acc"]
    if cfg.method.mode == "vcas":
        metrics.update({"final_s": float(model.s), "final_rho_mean": float(model.rho.mean()),
                        "final_nu_mean": float(model.nu.mean())})
    ctx.logger.log(metrics, trainer.step)
    ctx.logger.close()
    return metrics


__all__ = ["MODES", "Sampled", "SampledBlock", "SampledLinear", "SamplingState", "VarianceController",
           "ViTClassifier", "evaluate", "install", "keep_fraction", "run", "water_fill"]
