"""Device, precision, seeding and DDP set-up, read from the `hardware` config group.

DDP runs under `torchrun`, which sets RANK/WORLD_SIZE/LOCAL_RANK; gloo on CPU, nccl on GPU.
"""
from __future__ import annotations

import contextlib
import gc
import os
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from common.config import UserError

_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Hardware:
    device: torch.device
    precision: str = "fp32"
    rank: int = 0
    world_size: int = 1
    compile: bool = False
    kernels: str = "reference"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def autocast(self):
        """Autocast for bf16/fp16; a no-op context for fp32."""
        dtype = _DTYPES[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dtype)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"hardware asks for device '{name}' but CUDA is not available here; "
                        f"use hardware=cpu.")
    return torch.device(name)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def setup(cfg) -> Hardware:
    """Build a `Hardware` from `cfg.hardware`; join the process group when launched by torchrun."""
    hw = cfg.hardware
    if hw.precision not in _DTYPES:
        raise UserError(f"hardware.precision must be one of {sorted(_DTYPES)}, got '{hw.precision}'")
    device = resolve_device(hw.device)
    rank, world = 0, 1
    if hw.ddp and "WORLD_SIZE" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            dist.init_process_group(backend=backend)
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
    if hw.threads:
        torch.set_num_threads(int(hw.threads))
    seed_everything(int(cfg.seed), bool(hw.deterministic))
    return Hardware(device=device, precision=hw.precision, rank=rank, world_size=world,
                    compile=bool(hw.compile), kernels=hw.kernels)


def teardown() -> None:
    """Leave the process group. Callers drop their DDP models first; the collect frees any
    left in reference cycles, since a group destroyed at interpreter exit can abort gloo."""
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """Mean over ranks (identity in a single process); used for logged metrics."""
    if not dist.is_initialized():
        return value
    value = value.detach().clone()
    dist.all_reduce(value)
    return value / dist.get_world_size()


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate `x` from all ranks along dim 0, keeping the autograd graph.

    Contrastive losses need every rank's embeddings as negatives; the backward of
    torch.distributed.nn.all_gather sums the gradients back to their owners.
    """
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return x
    import torch.distributed.nn.functional as dist_fn

    return torch.cat(dist_fn.all_gather(x), dim=0)
