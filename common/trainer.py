"""One plain training loop (DESIGN.md section 6).

A method hands over a model with `training_step(batch) -> (loss, logs)` and a
`batch_fn(step) -> batch` that is a pure function of the step (so a resumed run sees the
same data as an uninterrupted one). The loop adds autocast, gradient accumulation and
clipping, a warm-up + cosine/constant schedule, periodic evaluation, a progress bar,
JSONL/wandb logging, atomic checkpoints (every N steps and on SIGINT/SIGTERM), exact
resume, DDP, and a NaN/inf guard.
"""
from __future__ import annotations

import contextlib
import math
import random
import signal
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from common import checkpoint
from common.callbacks import Callback
from common.config import UserError
from common.hardware import Hardware, all_reduce_mean
from common.logging import MetricLogger


class TrainingDiverged(UserError):
    pass


class RunInterrupted(UserError):
    def __init__(self, message: str):
        super().__init__(message, exit_code=130)


def _cosine(step: int, max_steps: int, warmup_steps: int, t0: float) -> float:
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _linear(step: int, max_steps: int, warmup_steps: int, t0: float) -> float:
    return max(0.0, 1.0 - (step - warmup_steps) / max(1, max_steps - warmup_steps))


# Multiplier of the base learning rate after the warm-up, by `trainer.schedule.name`.
SCHEDULES: dict[str, Callable[[int, int, int, float], float]] = {
    "cosine": _cosine,
    "linear": _linear,
    "constant": lambda step, max_steps, warmup_steps, t0: 1.0,
    # sqrt(t0 / (t0 + t)): Crystalformer's schedule
    "inverse_sqrt": lambda step, max_steps, warmup_steps, t0: math.sqrt(t0 / (t0 + step - warmup_steps)),
}


def lr_factor(step: int, max_steps: int, name: str, warmup_steps: int, t0: float = 4000.0) -> float:
    """Multiplier of the base learning rate: linear warm-up, then the named schedule."""
    if name not in SCHEDULES:
        raise UserError(f"trainer.schedule.name must be one of {sorted(SCHEDULES)}, got '{name}'", exit_code=2)
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    return SCHEDULES[name](step, max_steps, warmup_steps, t0)


class _Step(torch.nn.Module):
    """Routes forward() to training_step() so DDP sees a forward call and syncs gradients."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch):
        return self.model.training_step(batch)


def _split(batch, parts: int):
    """Split every tensor of a (nested) batch along dim 0 into `parts` micro-batches."""
    if parts == 1:
        return [batch]
    if isinstance(batch, torch.Tensor):
        return list(batch.chunk(parts))
    if isinstance(batch, (tuple, list)):
        return [type(batch)(items) for items in zip(*(_split(b, parts) for b in batch))]
    raise UserError(f"trainer.grad_accum > 1 needs tensor batches, got {type(batch).__name__}")


class Trainer:
    def __init__(self, model: torch.nn.Module, cfg_trainer, hw: Hardware, run_dir: str | Path,
                 logger: MetricLogger, batch_fn: Callable[[int], object],
                 eval_fn: Callable[[torch.nn.Module, int], dict] | None = None,
                 callbacks: list[Callback] | tuple = ()):
        """callbacks: EMA/SWA averages, best-on-validation, pruning masks (common.callbacks);
        their state is saved in and restored from the same checkpoint."""
        self.cfg, self.hw, self.logger = cfg_trainer, hw, logger
        self.callbacks = list(callbacks)
        self.should_stop = False
        self.run_dir = Path(run_dir)
        self.model = model.to(hw.device)
        self.batch_fn, self.eval_fn = batch_fn, eval_fn
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = instantiate(OmegaConf.to_container(cfg_trainer.optimizer), params=params)
        sched = cfg_trainer.schedule
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_factor(s, cfg_trainer.max_steps, sched.name, sched.warmup_steps, sched.get("t0", 4000.0)))
        self.scaler = torch.amp.GradScaler(enabled=hw.precision == "fp16")
        self.step_module: torch.nn.Module = _Step(self.model)
        if hw.distributed:
            self.step_module = DistributedDataParallel(self.step_module)
        if hw.compile:
            self.step_module = torch.compile(self.step_module)
        self.step = 0
        self.last_finite: dict = {}
        self._stop_signal: int | None = None

    @property
    def ckpt_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    # --- checkpoint ----------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"step": self.step, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "last_finite": self.last_finite,
                "callbacks": [cb.state_dict() for cb in self.callbacks],
                "rng": {"torch": torch.get_rng_state(), "numpy": torch.from_numpy(np.random.get_state()[1].astype(np.int64)),
                        "numpy_pos": int(np.random.get_state()[2]), "python": list(random.getstate()[1]),
                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}}

    def save(self) -> None:
        if self.hw.is_main:
            checkpoint.save(self.state_dict(), self.ckpt_path)

    def load(self) -> None:
        state = checkpoint.load(self.ckpt_path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        saved = state.get("callbacks", [])
        if len(saved) != len(self.callbacks):
            raise UserError(f"checkpoint {self.ckpt_path} holds the state of {len(saved)} callbacks, this run "
                            f"has {len(self.callbacks)} (written by another configuration); run again "
                            f"without resume=true")
        for cb, cb_state in zip(self.callbacks, saved):
            cb.load_state_dict(cb_state)
        self.step, self.last_finite = state["step"], state["last_finite"]
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        np.random.set_state(("MT19937", rng["numpy"].numpy().astype(np.uint32), rng["numpy_pos"], 0, 0.0))
        random.setstate((3, tuple(rng["python"]), None))
        if rng["cuda"]:
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.logger.truncate_after(self.step)

    # --- loop ------------------------------------------------------------------------
    def _on_signal(self, signum, frame):
        self._stop_signal = signum

    def train_step(self, batch) -> dict:
        cfg = self.cfg
        self.step_module.train()
        self.optimizer.zero_grad(set_to_none=True)
        micro = _split(batch, cfg.grad_accum)
        logs_sum: dict[str, float] = {}
        loss_sum = 0.0
        for i, part in enumerate(micro):
            last = i == len(micro) - 1
            sync = self.step_module.no_sync() if (self.hw.distributed and not last) else contextlib.nullcontext()
            with sync, self.hw.autocast():
                loss, logs = self.step_module(part)
            self.scaler.scale(loss / len(micro)).backward()
            loss_sum += loss.detach().float()
            for k, v in logs.items():
                logs_sum[k] = logs_sum.get(k, 0.0) + (v.detach().float() if torch.is_tensor(v) else v)
        if cfg.clip_grad or self.callbacks:
            self.scaler.unscale_(self.optimizer)   # callbacks and clipping see true gradients
        if cfg.clip_grad:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        for cb in self.callbacks:
            cb.before_optimizer_step(self)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        out = {"loss": loss_sum / len(micro), **{k: v / len(micro) for k, v in logs_sum.items()}}
        return out

    def fit(self, resume: bool = False) -> dict:
        cfg = self.cfg
        if resume:
            self.load()
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=not (cfg.progress and self.hw.is_main),
                   dynamic_ncols=True, mininterval=1.0, desc="train")
        try:
            while self.step < cfg.max_steps:
                logs = self.train_step(self.batch_fn(self.step))
                loss = float(logs["loss"])
                if not math.isfinite(loss):
                    raise TrainingDiverged(
                        f"loss became {loss} at step {self.step}; last finite metrics: "
                        f"{self.last_finite}. Lower the learning rate, enable trainer.clip_grad, "
                        f"or use precision fp32.")
                self.step += 1
                for cb in self.callbacks:
                    cb.after_step(self)
                if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                    metrics = {k: float(all_reduce_mean(torch.as_tensor(v))) for k, v in logs.items()}
                    metrics["lr"] = self.scheduler.get_last_lr()[0]
                    self.last_finite = metrics
                    self.logger.log(metrics, self.step)
                    bar.set_postfix(loss=f"{metrics['loss']:.4f}", refresh=False)
                if self.eval_fn and cfg.eval_every and self.step % cfg.eval_every == 0:
                    self.evaluate()
                if cfg.ckpt_every and self.step % cfg.ckpt_every == 0:
                    self.save()
                bar.update(1)
                if self.should_stop:
                    break
                if self._stop_signal is not None:
                    self.save()
                    raise RunInterrupted(
                        f"stopped by signal {signal.Signals(self._stop_signal).name} at step "
                        f"{self.step}; checkpoint saved to {self.ckpt_path}. Continue with the "
                        f"same command plus resume=true.")
        finally:
            bar.close()
            for s, h in handlers.items():
                signal.signal(s, h)
        if cfg.ckpt_every:
            self.save()
        for cb in self.callbacks:
            cb.on_fit_end(self)
        return self.last_finite

    @torch.no_grad()
    def evaluate(self) -> dict:
        self.model.eval()
        metrics = self.eval_fn(self.model, self.step)
        self.logger.log({f"eval/{k}": v for k, v in metrics.items()}, self.step)
        for cb in self.callbacks:
            cb.on_eval(self, metrics)
        return metrics

