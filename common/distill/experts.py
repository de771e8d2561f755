"""Expert trajectories (MTT's buffer.py / DATM's buffer_FTD.py without GSAM): flat snapshots of SGD
training at every epoch, cached on disk by a fingerprint of their settings."""
from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from common.checkpoint import save
from common.distill.unroll import flatten_params

BUFFER_KEYS = ("num_experts", "epochs", "lr", "batch_size", "momentum", "expert_seed", "version")


def train_expert(module: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float, batch_size: int,
                 generator: torch.Generator | None = None, momentum: float = 0.0, weight_decay: float = 0.0,
                 augment: Callable | None = None) -> torch.Tensor:
    """Train `module` in place with SGD on cross-entropy; (epochs + 1, P): the initial parameters and
    each epoch's end. One randperm per epoch, consecutive batches (the last one may be short)."""
    if epochs < 0 or batch_size < 1 or not lr > 0:
        raise ValueError(f"need epochs >= 0, batch_size >= 1, lr > 0; got {epochs}, {batch_size}, {lr}")
    if len(x) != len(y):
        raise ValueError(f"images and labels differ in length: {len(x)} vs {len(y)}")
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    snaps = [flatten_params(module)]
    module.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=generator).split(batch_size):
            xb = x[idx] if augment is None else augment(x[idx])
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(module(xb), y[idx]).backward()
            opt.step()
        snaps.append(flatten_params(module))
    return torch.stack(snaps)


def fingerprint(settings: dict) -> str:
    """sha256 hex of the settings' canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cached(settings: dict, build: Callable[[], object], cache_dir: str | Path):
    """build() once per fingerprint, saved atomically as <cache_dir>/<fingerprint>.pt and reloaded
    weights-only (a tensor or a dict of tensors). An unreadable file is warned about and rebuilt."""
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{fingerprint(settings)}.pt"
    if path.exists():
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 (any unreadable file is rebuilt)
            warnings.warn(f"cache file {path} is unreadable ({type(err).__name__}: {err}); rebuilding it")
    value = build()
    save(value, path)   # common.checkpoint's atomic write: temporary file, fsync, rename
    return value


def data_digest(*tensors: torch.Tensor) -> str:
    """sha256 of the tensors' bytes: part of a buffer's fingerprint, so other data never hit it."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def expert_buffer(settings: dict, x: torch.Tensor, y: torch.Tensor, make_net: Callable[[], nn.Module],
                  cache_dir: str | Path) -> torch.Tensor:
    """(E, T + 1, P) expert trajectories, cached. `settings` names the data, split, preprocessing
    and network (free-form) and must hold num_experts (E), epochs (T), lr, batch_size, momentum,
    expert_seed and version. Expert e initialises and shuffles with seed expert_seed + e, never the
    run seed: every row and run seed shares one buffer (the official buffers are fixed files).
    The fingerprint also holds a digest of (x, y)."""
    missing = [k for k in BUFFER_KEYS if k not in settings]
    if missing:
        raise ValueError(f"expert_buffer settings lack {missing} (need {list(BUFFER_KEYS)})")
    if int(settings["num_experts"]) < 1:
        raise ValueError(f"num_experts must be >= 1, got {settings['num_experts']}")
    key = dict(settings, data_sha256=data_digest(x, y))

    def build() -> torch.Tensor:
        out = []
        for e in range(int(settings["num_experts"])):
            seed = int(settings["expert_seed"]) + e
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                net = make_net()
            out.append(train_expert(net, x, y, int(settings["epochs"]), float(settings["lr"]),
                                    int(settings["batch_size"]), torch.Generator().manual_seed(seed),
                                    momentum=float(settings["momentum"]),
                                    weight_decay=float(settings.get("weight_decay", 0.0))))
        return torch.stack(out)

    return cached(key, build, cache_dir)
