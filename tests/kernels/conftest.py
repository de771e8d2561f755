"""Kernel tests run Triton in its CPU interpreter wherever CUDA is absent. The variable must be
set before any `common.kernels.*.triton` module is imported (triton.jit reads it when it
decorates a kernel), hence here, at collection."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
