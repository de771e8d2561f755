"""Helpers shared by the Triton implementations (imported only by the `triton.py` files)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from common.kernels import interpreting

# Reductions are written tl.reduce(x, axis, ADD) rather than tl.sum(x, axis): tl.sum and tl.max
# are themselves @triton.jit functions, and the interpreter re-patches triton.language on every
# such nested call (~10 ms each, the larger part of the test suite's time). tl.reduce with the
# standard combine functions is the same reduction (tl.sum/tl.max add only dtype promotion,
# and every reduction here is on fp32) and the interpreter runs it as one numpy call.
from triton.language.standard import _elementwise_max as MAX  # noqa: E402
from triton.language.standard import _sum_combine as ADD  # noqa: E402

_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def next_pow2(n: int, minimum: int = 1) -> int:
    return max(triton.next_power_of_2(max(int(n), 1)), minimum)


def dot_dtype(dtype: torch.dtype):
    """Operand type for tl.dot. Half inputs feed the tensor cores as they are; fp32 stays fp32.
    The interpreter computes a bf16 tl.dot wrongly (numpy has no bfloat16), so there every
    operand is upcast to fp32 first: the same kernel, exact products."""
    if interpreting():
        return tl.float32
    return _TL_DTYPES[dtype]


def dot_precision() -> str:
    """fp32 tl.dot precision that matches torch's matmul setting: IEEE unless the user allowed
    TF32 (torch.backends.cuda.matmul.allow_tf32), so "triton" and "reference" agree."""
    if not interpreting() and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def check_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in _TL_DTYPES:
        raise ValueError(f"{name} must be float32, bfloat16 or float16 for the Triton kernels, got {t.dtype}")


def csr(index: torch.Tensor, num_segments: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(order, offsets): a stable permutation that groups `index` (E,) by value, and the
    (num_segments + 1,) offsets of each group in that order. O(E) integers, no data copies,
    and no host synchronisation (searchsorted, not bincount, whose size depends on the data)."""
    grouped, order = torch.sort(index, stable=True)
    bounds = torch.arange(num_segments + 1, device=index.device, dtype=index.dtype)
    return order, torch.searchsorted(grouped, bounds)


def same_device(device: torch.device, **tensors) -> None:
    """The kernels take raw pointers: every tensor must live where the main input does."""
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise ValueError(f"{name} is on {t.device} but the other inputs are on {device}")
