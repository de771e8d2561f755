"""Δ-SGD: clients that tune their own step size in federated learning (Kim, Toghani, Uribe,
Kyrillidis; ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from methods.delta_sgd.model import MLP, CNNMnist
from methods.delta_sgd.rule import delta_lr, delta_sgd_local, growth_local, regret


def build(cfg):
    """The first task's model, from the config alone."""
    first = cfg.method.tasks[cfg.method.run_tasks[0]]
    return instantiate(cfg.method.models[first.model])


def run(cfg, ctx) -> dict[str, float]:
    """Every row of `method.rows` on every task of `method.tasks` (FedAvg through
    common.tasks.federated), then the regret table: metrics `<row>/<metric>`."""
    from common.tasks.federated import check_federated
    from methods.delta_sgd.train import run_all

    check_federated(cfg.method.federated)
    return run_all(cfg, ctx)


__all__ = ["CNNMnist", "MLP", "build", "delta_lr", "delta_sgd_local", "growth_local", "regret", "run"]
