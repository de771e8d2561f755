"""Federated run template: FedAvg rounds (`common.federated.federated_fit`) with the run's
checkpoint folder, resume flag, curve and seed, then the final evaluation.

Its knobs live in `configs/federated/default.yaml`, pulled in under `method.federated` by a
method config (`- /federated@method.federated: default`): a new top-level key is refused by the
shared schema, so `check_federated` types them here before any data loads."""
from __future__ import annotations

from typing import Callable, Mapping

import torch
from omegaconf import OmegaConf

from common import checkpoint
from common.config import UserError
from common.federated import WEIGHTINGS, federated_fit
from common.logging import MetricLogger

# key -> (kind, lowest value, choices); what configs/federated/default.yaml holds
FEDERATED_KEYS = {
    "num_clients": (int, 1, None), "clients_per_round": (int, 1, None), "rounds": (int, 0, None),
    "local_epochs": (int, 0, None), "local_batch_size": (int, 1, None), "alpha": (float, None, None),
    "min_size": (int, 0, None), "weighting": (str, None, WEIGHTINGS), "eval_every": (int, 0, None),
    "ckpt_every": (int, 0, None),
}


def check_federated(fed_cfg, where: str = "method.federated") -> None:
    """UserError (exit 2) naming the key and value when a federated knob is missing, unknown,
    of the wrong type or out of range."""
    values = OmegaConf.to_container(fed_cfg, resolve=True) if not isinstance(fed_cfg, dict) else dict(fed_cfg)
    for key in values:
        if key not in FEDERATED_KEYS:
            raise UserError(f"unknown key {where}.{key}; the federated knobs are {', '.join(FEDERATED_KEYS)}",
                            exit_code=2)
    for key, (kind, low, choices) in FEDERATED_KEYS.items():
        if key not in values:
            raise UserError(f"{where}.{key} is missing (configs/federated/default.yaml has it)", exit_code=2)
        v = values[key]
        ok = isinstance(v, kind) and not isinstance(v, bool) if kind is not float else \
            isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok:
            raise UserError(f"{where}.{key} must be {kind.__name__}, got {v!r}", exit_code=2)
        if key == "alpha" and not v > 0:
            raise UserError(f"{where}.alpha must be > 0, got {v!r}", exit_code=2)
        if low is not None and v < low:
            raise UserError(f"{where}.{key} must be >= {low}, got {v!r}", exit_code=2)
        if choices and v not in choices:
            raise UserError(f"{where}.{key} must be one of {', '.join(choices)}, got {v!r}", exit_code=2)
    if values["clients_per_round"] > values["num_clients"]:
        raise UserError(f"{where}.clients_per_round={values['clients_per_round']} exceeds "
                        f"num_clients={values['num_clients']}", exit_code=2)


def _curve_row(row: dict) -> dict:
    """A history row as the curve logs it: `loss` beside `train/loss`, the key the smoke tests and
    plots read from every run's JSONL."""
    return {**row, "loss": row["train/loss"]} if "train/loss" in row else row


def federated(ctx, models: Mapping[str, torch.nn.Module], client_sizes, local_update: Callable,
              evaluate: Callable[[Mapping, int], dict], fed_cfg, *, stage: str | None = None,
              clients_per_round: int | None = None, server_update: Callable | None = None) -> dict[str, float]:
    """`fed_cfg.rounds` FedAvg rounds over `client_sizes` clients; checkpoint `federated.pt` in the
    run dir (in `<run dir>/<stage>` for a named stage: one FedAvg per cluster), `ctx.resume`,
    the curve in the run's JSONL (a stage's own), `ctx.seed`. Returns the final evaluation and
    `train_loss` (the last round's weighted client mean of `loss`, when the clients report it).
    `clients_per_round` overrides the config's (a cluster smaller than it trains all its clients)."""
    run_dir, logger = ctx.run_dir, ctx.logger
    if stage is not None:
        run_dir = ctx.run_dir / stage
        logger = MetricLogger(run_dir, OmegaConf.create({"kind": "jsonl"}),
                              enabled=ctx.hw.is_main and ctx.logger.enabled, resume=ctx.resume)
    ckpt_path = run_dir / "federated.pt"
    if ctx.resume and ckpt_path.exists():   # the curve reads as one run: drop rounds after the checkpoint
        logger.truncate_after(int(checkpoint.load(ckpt_path)["step"]))
    per_round = int(fed_cfg.clients_per_round) if clients_per_round is None else int(clients_per_round)
    try:
        history = federated_fit(models, client_sizes, local_update, rounds=int(fed_cfg.rounds),
                                clients_per_round=per_round, seed=ctx.seed, weighting=str(fed_cfg.weighting),
                                evaluate=evaluate, eval_every=int(fed_cfg.eval_every),
                                log=lambda row, step: logger.log(_curve_row(row), step),
                                ckpt_path=ckpt_path, ckpt_every=int(fed_cfg.ckpt_every),
                                resume=ctx.resume, server_update=server_update)
    finally:
        if stage is not None:
            logger.close()
    if not history:
        return {}
    final = history[-1]
    out = {k.removeprefix("eval/"): float(v) for k, v in final.items() if k.startswith("eval/")}
    if "train/loss" in final:
        out["train_loss"] = float(final["train/loss"])
    ctx.last_step = max(ctx.last_step, int(final["round"]))
    return out
