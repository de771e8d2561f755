"""Atomic checkpoint save and load with clear errors."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from common.config import UserError


def save(state: dict, path: str | os.PathLike) -> None:
    """Write to a temporary file in the same folder, fsync, then rename: a crash mid-write
    never leaves a truncated checkpoint under the real name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | os.PathLike, map_location="cpu") -> dict:
    path = Path(path)
    if not path.exists():
        raise UserError(f"checkpoint {path} does not exist; run without resume=true to start fresh.")
    try:
        # weights_only: loading a checkpoint never executes code from the file
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for truncated/corrupt files
        raise UserError(f"checkpoint {path} is corrupt or not a checkpoint ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:200]}). Delete it, or run without resume=true.")
    if not isinstance(state, dict) or "step" not in state:
        raise UserError(f"checkpoint {path} has no 'step' entry; it was not written by common.trainer.")
    return state
