"""A tiny model and config for trainer tests (shared by the DDP worker)."""
import os
import signal

import torch
from omegaconf import OmegaConf
from torch import nn

from common.data import StepSampler


class TinyRegressor(nn.Module):
    """Per-sample MSE (so sharded batches average exactly) with dropout (so RNG state matters)."""

    def __init__(self, dropout: float = 0.2, signal_at: int | None = None, nan_at: int | None = None):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 1))
        self.calls, self.signal_at, self.nan_at = 0, signal_at, nan_at

    def training_step(self, batch):
        x, y = batch
        self.calls += 1
        if self.signal_at is not None and self.calls == self.signal_at:
            os.kill(os.getpid(), signal.SIGTERM)  # a real signal, handled by the trainer
        loss = (self.net(x).squeeze(-1) - y).pow(2).mean()
        if self.nan_at is not None and self.calls >= self.nan_at:
            loss = loss * float("nan")
        return loss, {"mse": loss.detach()}


def data(n: int = 64):
    g = torch.Generator().manual_seed(123)
    x = torch.randn(n, 6, generator=g)
    return x, x @ torch.randn(6, generator=g) + 0.1 * torch.randn(n, generator=g)


def trainer_cfg(**kw):
    base = dict(max_steps=12, batch_size=16, grad_accum=1, clip_grad=1.0,
                optimizer={"_target_": "torch.optim.AdamW", "lr": 0.05, "weight_decay": 0.01},
                schedule={"name": "cosine", "warmup_steps": 2}, log_every=1, eval_every=0,
                ckpt_every=4, progress=False)
    base.update(kw)
    return OmegaConf.create(base)


def batch_fn(x, y, cfg, rank=0, world=1, seed=0):
    sampler = StepSampler(len(x), cfg.batch_size, seed, rank, world)
    return lambda step: (x[sampler(step)], y[sampler(step)])
