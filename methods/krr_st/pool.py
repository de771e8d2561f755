"""The model pool (official `model_pool.py`): P students trained online on the current (X_s, Y_s)
by full-batch MSE steps, each re-initialised after T steps, so that the outer loss sees features
from every stage of training."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


class ModelPool:
    """`models[j]` with its SGD optimiser and `steps[j]` = u_j, the MSE steps it has taken.

    init(x, y): model j in order is make_model(), u_j = randint(1, online_steps) from `generator`,
    then u_j full-batch steps of MSE(f_j(x), y). update(j, x, y): one more step and u_j += 1; when
    u_j has reached online_steps, f_j is a fresh make_model() with a fresh optimiser and u_j = 0
    (the official pool never resets its counter, so after ~T*P steps it re-initialises at every
    update: here the counter restarts, as the paper describes)."""

    def __init__(self, make_model: Callable[[], nn.Module], num_models: int, online_steps: int,
                 generator: torch.Generator | None = None, lr: float = 0.1, momentum: float = 0.9,
                 weight_decay: float = 1e-3):
        if num_models < 1:
            raise ValueError(f"num_models must be >= 1, got {num_models}")
        if online_steps < 2:
            raise ValueError(f"online_steps must be >= 2 (u_j is drawn from [1, online_steps)), got {online_steps}")
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self.make_model, self.num_models, self.online_steps = make_model, int(num_models), int(online_steps)
        self.generator, self.lr, self.momentum, self.weight_decay = generator, lr, momentum, weight_decay
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.steps: list[int] = []

    def _fresh(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        model = self.make_model()
        return model, torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum,
                                      weight_decay=self.weight_decay)

    @staticmethod
    def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    def init(self, x: torch.Tensor, y: torch.Tensor) -> None:
        x, y = x.detach(), y.detach()
        self.models, self.optimizers, self.steps = [], [], []
        for _ in range(self.num_models):
            model, opt = self._fresh()
            with torch.no_grad():           # eval mode: the check must not move BatchNorm's running statistics
                out = model.eval()(x[:1])
            if out.shape[1:] != y.shape[1:]:
                raise ValueError(f"the students' head width {tuple(out.shape[1:])} differs from the targets' "
                                 f"dimension {tuple(y.shape[1:])}")
            u = int(torch.randint(1, self.online_steps, (1,), generator=self.generator))
            for _ in range(u):
                self._step(model, opt, x, y)
            self.models.append(model)
            self.optimizers.append(opt)
            self.steps.append(u)

    def update(self, j: int, x: torch.Tensor, y: torch.Tensor) -> None:
        if not 0 <= j < len(self.models):
            raise ValueError(f"model index {j} outside the pool of {len(self.models)} (call init first)")
        if self.steps[j] >= self.online_steps:
            self.models[j], self.optimizers[j] = self._fresh()
            self.steps[j] = 0
        else:
            self._step(self.models[j], self.optimizers[j], x.detach(), y.detach())
            self.steps[j] += 1
