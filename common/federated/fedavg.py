"""FedAvg (McMahan et al. 2017) as Flower's strategy splits it: sample clients -> local fit on
deep copies -> aggregate weighted by the number of examples -> evaluate, round after round, with
a checkpoint per `ckpt_every` rounds and a resume that reproduces the uninterrupted run."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from common import checkpoint
from common.hardware import seed_everything
from common.federated.sampling import client_seed, sample_clients

WEIGHTINGS = ("samples", "uniform")


def fedavg(states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float]) -> dict[str, torch.Tensor]:
    """Floating entries: sum_k (w_k / sum w) theta_k in float64, cast back to their dtype; the
    others (`num_batches_tracked`) from the state of the largest weight (the first on ties)."""
    if len(states) == 0 or len(states) != len(weights):
        raise ValueError(f"fedavg needs one weight per state and at least one state, got {len(states)} states "
                         f"and {len(weights)} weights")
    w = np.asarray([float(x) for x in weights], dtype=np.float64)
    if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"fedavg weights must be finite, non-negative and not all zero, got {list(weights)}")
    keys = list(states[0].keys())
    for k, s in enumerate(states[1:], 1):
        if set(s.keys()) != set(keys):
            diff = sorted(set(s.keys()) ^ set(keys))
            raise ValueError(f"fedavg: state {k} has mismatched keys with state 0: {diff[:5]}")
    w = w / w.sum()
    top = int(np.argmax(w))
    out = {}
    for key in keys:
        ref = states[0][key]
        if torch.is_floating_point(ref):
            acc = torch.zeros(ref.shape, dtype=torch.float64, device=ref.device)
            for wk, s in zip(w, states):
                acc += float(wk) * s[key].to(torch.float64)
            out[key] = acc.to(ref.dtype)
        else:
            out[key] = states[top][key].clone()
    return out


def _weighted_mean(rows: list[dict], weights: list[float]) -> dict[str, float]:
    total: dict[str, float] = {}
    mass: dict[str, float] = {}
    for row, w in zip(rows, weights):
        for k, v in (row or {}).items():
            total[k] = total.get(k, 0.0) + w * float(v)
            mass[k] = mass.get(k, 0.0) + w
    return {k: total[k] / mass[k] for k in total if mass[k] > 0}


def federated_fit(models: Mapping[str, torch.nn.Module], client_sizes: Sequence[int],
                  local_update: Callable[[int, int, dict], dict | None], *, rounds: int, clients_per_round: int,
                  seed: int, weighting: str = "samples", evaluate: Callable[[Mapping, int], dict] | None = None,
                  eval_every: int = 1, log: Callable[..., None] | None = None, ckpt_path: str | Path | None = None,
                  ckpt_every: int = 1, resume: bool = False, server_update: Callable | None = None) -> list[dict]:
    """Round r: `sample_clients`; per client in order, deep copies of `models` and the global
    RNGs (torch, numpy, random) seeded with `client_seed`, then `local_update(client, r, copies)`
    trains the copies in place and returns its metrics; each named model is averaged by `fedavg`
    (weights n_k for `samples`, 1 for `uniform`) and loaded, or handed to
    `server_update(models, averaged, r)`. Returns the history, one row per round:
    `round`, `clients`, `train/<k>` (weighted client mean), `eval/<k>` (every `eval_every`
    rounds and the last, in eval mode without gradients)."""
    if not models:
        raise ValueError("federated_fit needs at least one named model")
    sizes = [int(n) for n in client_sizes]
    if not sizes or min(sizes) < 0:
        raise ValueError(f"client_sizes must be non-negative and non-empty, got {list(client_sizes)}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if rounds < 0 or eval_every < 0 or ckpt_every < 0:
        raise ValueError(f"rounds, eval_every, ckpt_every must be >= 0, got {rounds}, {eval_every}, {ckpt_every}")
    if not 1 <= clients_per_round <= len(sizes):
        raise ValueError(f"clients_per_round={clients_per_round} must be in [1, {len(sizes)}] (the number of clients)")
    history: list[dict] = []
    start = 0
    path = Path(ckpt_path) if ckpt_path is not None else None
    if resume and path is not None and path.exists():
        state = checkpoint.load(path)
        for name, model in models.items():
            model.load_state_dict(state["models"][name])
        for key, obj in (("local_update", local_update), ("server_update", server_update)):
            if key in state and hasattr(obj, "load_state_dict"):
                obj.load_state_dict(state[key])
        history, start = list(state["history"]), int(state["step"])

    for r in range(start, rounds):
        clients = sample_clients(len(sizes), clients_per_round, r, seed)
        states: dict[str, list] = {name: [] for name in models}
        rows, weights = [], []
        for client in clients:
            copies = {name: copy.deepcopy(m) for name, m in models.items()}
            seed_everything(client_seed(seed, r, client))
            rows.append(local_update(client, r, copies))
            weights.append(float(sizes[client]) if weighting == "samples" else 1.0)
            for name, m in copies.items():
                states[name].append(m.state_dict())
        averaged = {name: fedavg(states[name], weights) for name in models}
        if server_update is not None:
            server_update(models, averaged, r)
        else:
            for name, m in models.items():
                m.load_state_dict(averaged[name])
        row: dict = {"round": r + 1, "clients": clients}
        row.update({f"train/{k}": v for k, v in _weighted_mean(rows, weights).items()})
        last = r + 1 == rounds
        if evaluate is not None and (last or (eval_every and (r + 1) % eval_every == 0)):
            row.update({f"eval/{k}": float(v) for k, v in _evaluate(models, evaluate, r).items()})
        history.append(row)
        if log is not None:
            log(row, step=r + 1)
        if path is not None and ckpt_every and ((r + 1) % ckpt_every == 0 or last):
            state = {"step": r + 1, "models": {n: m.state_dict() for n, m in models.items()}, "history": history}
            for key, obj in (("local_update", local_update), ("server_update", server_update)):
                if hasattr(obj, "state_dict"):
                    state[key] = obj.state_dict()
            checkpoint.save(state, path)
    return history


def _evaluate(models: Mapping[str, torch.nn.Module], evaluate: Callable, r: int) -> dict:
    modes = {n: m.training for n, m in models.items()}
    for m in models.values():
        m.eval()
    try:
        with torch.no_grad():
            return dict(evaluate(models, r))
    finally:
        for n, m in models.items():
            m.train(modes[n])
