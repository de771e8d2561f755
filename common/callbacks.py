"""Named mechanisms around the one training loop (common/trainer.py): weight averages (EMA, SWA),
model selection and early stopping on validation, and pruning masks that stay at zero.

A callback's state goes into the run's checkpoint, so `resume=true` continues an average or
a best-so-far exactly where the interrupted run left it.
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel


class Callback:
    """Hooks the Trainer calls, in this order within a step: before_optimizer_step (gradients
    are final), after_step (weights updated, `trainer.step` already counts this step), and
    on_eval after an evaluation. `trainer.should_stop = True` ends the fit after this step."""

    def before_optimizer_step(self, trainer) -> None:
        pass

    def after_step(self, trainer) -> None:
        pass

    def on_eval(self, trainer, metrics: dict) -> None:
        pass

    def on_fit_end(self, trainer) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _frozen_average(model: nn.Module, avg_fn=None) -> AveragedModel:
    # use_buffers=False: buffers (BN statistics, fixed scales) are copied from the model at each
    # update rather than averaged, as both official codes that use an average here do
    averaged = AveragedModel(model, avg_fn=avg_fn, use_buffers=False).eval()
    averaged.requires_grad_(False)  # never handed to the optimiser
    return averaged


class EMA(Callback):
    """Exponential moving average of the weights after every optimiser step: the first update
    copies the weights, update n >= 1 mixes with decay min(decay, (1 + n) / (10 + n)) when
    `warmup` (the official RFM code's warm-up; a plain 0.999 keeps 0.999^2000 = 13.5% of the
    starting weights after 2000 steps)."""

    def __init__(self, model: nn.Module, decay: float = 0.999, warmup: bool = True):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMA decay must be in [0, 1], got {decay}")

        def avg_fn(averaged: torch.Tensor, current: torch.Tensor, num_averaged) -> torch.Tensor:
            n = float(num_averaged)
            d = min(decay, (1.0 + n) / (10.0 + n)) if warmup else decay
            return averaged.lerp(current, 1.0 - d)

        self.source = model
        self.averaged = _frozen_average(model, avg_fn)

    @property
    def module(self) -> nn.Module:
        return self.averaged.module

    def after_step(self, trainer) -> None:
        self.averaged.update_parameters(self.source)

    def state_dict(self) -> dict:
        return self.averaged.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.averaged.load_state_dict(state)


class SWA(Callback):
    """Stochastic weight averaging (equal weights) of the model every `every` steps after
    `start_step`; buffers follow the model (see `_frozen_average`)."""

    def __init__(self, model: nn.Module, start_step: int, every: int = 1):
        if every < 1 or start_step < 0:
            raise ValueError(f"SWA needs every >= 1 and start_step >= 0, got {every}, {start_step}")
        self.source, self.start_step, self.every = model, start_step, every
        self.averaged = _frozen_average(model)

    @property
    def module(self) -> nn.Module:
        """The average, or the model itself while nothing has been averaged yet."""
        return self.averaged.module if self.averaged.n_averaged > 0 else self.source

    def after_step(self, trainer) -> None:
        if trainer.step > self.start_step and trainer.step % self.every == 0:
            self.averaged.update_parameters(self.source)

    def state_dict(self) -> dict:
        return self.averaged.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.averaged.load_state_dict(state)


class BestOnValidation(Callback):
    """Keep the weights of the best evaluation by `metric` (model selection on validation, the
    test split untouched); with `patience`, stop after that many evaluations without a gain.
    At the end of the fit the model holds the best weights."""

    def __init__(self, model: nn.Module, metric: str, mode: str = "max", patience: int | None = None):
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got '{mode}'")
        self.model, self.metric, self.mode, self.patience = model, metric, mode, patience
        self.best = -math.inf if mode == "max" else math.inf
        self.best_step, self.bad_evals, self.best_state = -1, 0, None

    def on_eval(self, trainer, metrics: dict) -> None:
        if self.metric not in metrics:
            raise KeyError(f"BestOnValidation watches '{self.metric}', which the evaluation does not "
                           f"return (it returns {sorted(metrics)})")
        value = float(metrics[self.metric])
        better = value > self.best if self.mode == "max" else value < self.best
        if better:  # ties keep the earlier weights
            self.best, self.best_step, self.bad_evals = value, trainer.step, 0
            self.best_state = copy.deepcopy(self.model.state_dict())
        else:
            self.bad_evals += 1
            if self.patience is not None and self.bad_evals >= self.patience:
                trainer.should_stop = True

    def on_fit_end(self, trainer) -> None:
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)

    def state_dict(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "bad_evals": self.bad_evals,
                "best_state": self.best_state}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_step = state["best"], state["best_step"]
        self.bad_evals, self.best_state = state["bad_evals"], state["best_state"]


class KeepMasked(Callback):
    """Pruned weights stay exactly zero: their gradients are zeroed before the optimiser step
    and the masks re-applied after it (momentum or weight decay cannot revive them).
    `masks` maps parameter names (as in `model.named_parameters()`) to boolean keep-masks."""

    def __init__(self, model: nn.Module, masks: dict[str, torch.Tensor]):
        params = dict(model.named_parameters())
        unknown = sorted(set(masks) - set(params))
        if unknown:
            raise ValueError(f"masks name parameters the model does not have: {unknown[:5]}")
        for name, mask in masks.items():
            if mask.shape != params[name].shape:
                raise ValueError(f"mask of {name} has shape {tuple(mask.shape)}, the weight "
                                 f"{tuple(params[name].shape)}")
        self.pairs = [(params[n], m.to(params[n].device, torch.bool)) for n, m in masks.items()]
        self.apply()

    @torch.no_grad()
    def apply(self) -> None:
        for p, mask in self.pairs:
            p.mul_(mask)

    @torch.no_grad()
    def before_optimizer_step(self, trainer) -> None:
        for p, mask in self.pairs:
            if p.grad is not None:
                p.grad.mul_(mask)

    def after_step(self, trainer) -> None:
        self.apply()
