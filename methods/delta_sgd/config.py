"""The typed entries of `method.rows` (a client optimiser) and `method.tasks` (a federated task).
Each config entry is a `_target_` block naming one of these dataclasses, so common/target_types.py
checks every value's type and choice against the fields below before anything loads; the
ranges are checked here (ValueError)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal


@dataclass(frozen=True)
class Row:
    """One client optimiser. `lr`: the step (sgd, adam, adagrad) or Δ-SGD's / growth's η₋₁;
    `momentum`, `decay` (÷10 at 50% and 75% of the rounds): sgd only; `amplifier` (δ), `damping`
    (2/γ), `eps`, `weight_decay`: dsgd (amplifier also growth); `low`, `high`: randlr's log-uniform
    range; `c` (and `eps`): sps; `reps_rel` (and `eps`): dog (methods/delta_sgd/baselines.py).
    `control`: a stand-in row, left out of the best-of-task the regret is taken against."""
    kind: Literal["sgd", "adam", "adagrad", "dsgd", "growth", "randlr", "sps", "dog"]
    lr: float = 0.2
    momentum: float = 0.0
    decay: bool = False
    amplifier: float = 0.1
    damping: float = 1.0
    eps: float = 1e-8
    weight_decay: float = 0.0
    low: float = 0.01
    high: float = 1.0
    c: float = 0.5
    reps_rel: float = 1e-6
    control: bool = False

    def __post_init__(self):
        checks = {"lr": self.lr > 0, "momentum": 0 <= self.momentum < 1, "amplifier": self.amplifier >= 0,
                  "damping": self.damping > 0, "eps": self.eps >= 0, "weight_decay": self.weight_decay >= 0,
                  "low": 0 < self.low <= self.high, "high": self.high < math.inf,
                  "c": self.c > 0, "reps_rel": self.reps_rel > 0}
        for name, ok in checks.items():
            value = getattr(self, name)
            if not (math.isfinite(float(value)) and ok):
                raise ValueError(f"row ({self.kind}): {name}={value!r} is out of range")


@dataclass(frozen=True)
class Task:
    """One federated task: `source`, the Dirichlet `alpha`, a training `pool` split among the
    clients, `eval_size` evaluation rows, the `model` key of `method.models`; `per_client`: each
    client's part redrawn to that many images with replacement (the official sampler's size)."""
    source: Literal["satellite", "digits", "fashion_mnist", "mnist", "cifar10", "cifar100"]
    alpha: float
    pool: int
    eval_size: int
    model: str
    per_client: int | None = None

    def __post_init__(self):
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"task ({self.source}): alpha must be finite and > 0, got {self.alpha!r}")
        if self.pool < 1 or self.eval_size < 1:
            raise ValueError(f"task ({self.source}): pool and eval_size must be >= 1, got {self.pool}, {self.eval_size}")
        if self.per_client is not None and self.per_client < 1:
            raise ValueError(f"task ({self.source}): per_client must be >= 1 or null, got {self.per_client}")


def as_spec(cls, entry: dict, where: str) -> dict:
    """A config entry (its `_target_` and other `_` keys dropped) checked through `cls`, as a dict."""
    fields = {k: v for k, v in entry.items() if not str(k).startswith("_")}
    try:
        return asdict(cls(**fields))
    except TypeError as err:
        raise ValueError(f"{where}: {err}") from None


__all__ = ["Row", "Task", "as_spec"]
