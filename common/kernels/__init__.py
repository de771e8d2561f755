"""GPU kernels beside plain-PyTorch references, one folder per op (see README.md).

Each op takes an explicit `impl` ("reference" | "triton" | "auto"); `resolve_impl` turns it
into the implementation that runs on the tensors' device. There is no global switch: the
caller passes `impl=` (a run reads it from `hardware.kernels`). Only the `triton.py` files
import triton, and only when a Triton implementation is asked for.
"""
from __future__ import annotations

import importlib.util
import os

import torch

IMPLS = ("reference", "triton", "auto")


class KernelUnavailable(RuntimeError):
    """impl="triton" was asked for where Triton cannot run."""


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1 (Triton runs kernels on the CPU, in numpy). The variable
    must be set before the first kernel module is imported: triton.jit reads it at decoration."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def resolve_impl(impl: str, device: torch.device | str) -> str:
    """"reference" or "triton" for tensors on `device`.

    auto: Triton on CUDA when triton is installed, the reference elsewhere (also on the CPU
    under the interpreter: the interpreter is for tests, not for runs).
    triton: Triton on CUDA, or on the CPU under TRITON_INTERPRET=1; elsewhere an error.
    """
    if impl not in IMPLS:
        raise ValueError(f"kernel impl must be one of {IMPLS}, got {impl!r}")
    device = torch.device(device)
    if impl == "reference":
        return "reference"
    if impl == "auto":
        return "triton" if device.type == "cuda" and triton_installed() else "reference"
    if not triton_installed():
        raise KernelUnavailable("impl='triton' needs the triton package (pip install triton); "
                                "use impl='reference' or 'auto'.")
    if device.type != "cuda" and not interpreting():
        raise KernelUnavailable(f"impl='triton' needs CUDA tensors, got tensors on '{device}'; "
                                "use impl='auto' (reference off CUDA), or set TRITON_INTERPRET=1 "
                                "before importing the kernels to run Triton on the CPU (slow, for tests).")
    return "triton"


__all__ = ["IMPLS", "KernelUnavailable", "interpreting", "resolve_impl", "triton_installed"]
