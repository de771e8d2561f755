"""Parity harness: every registered op, impl="triton" against its plain-PyTorch reference,
forward and every input gradient (Liger-Kernel / FlashAttention style).

fp32: tight tolerances against the fp32 reference. bf16: the Triton op on bf16 inputs against
the reference computed in fp32 on the same (bf16-valued) inputs, with a loose tolerance
(the reference run in bf16 has errors of its own, so it is not the yardstick).
Default variant: tiny odd shapes, on the CPU under TRITON_INTERPRET=1 (set by conftest.py),
or on CUDA when the kernels are compiled. `gpu` variant: larger shapes, CUDA only.
"""
from __future__ import annotations

import pytest
import torch

from common.kernels import interpreting
from tests.kernels.kernel_registry import REGISTRY

TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 3e-2}     # rtol; atol is this × max|expected|


def default_device() -> str | None:
    if interpreting():
        return "cpu"
    return "cuda" if torch.cuda.is_available() else None


def _prepare(inputs, dtype, device):
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor):
            grad = t.requires_grad
            t = t.detach().to(device)
            if t.is_floating_point():
                t = t.to(dtype)
            t.requires_grad_(grad)
        out.append(t)
    return out


def _run(op, inputs, kwargs, impl, seed=1):
    """Output and the gradients of every differentiable input for one fixed output cotangent."""
    out = op.fn(*inputs, impl=impl, **kwargs)
    gen = torch.Generator().manual_seed(seed)
    cotangent = torch.randn(out.shape, generator=gen).to(out.dtype).to(out.device)
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(out, wrt, cotangent, allow_unused=True)
    return [out, *grads]


def check(op, case, shape, dtype, device):
    inputs, kwargs = op.build(torch.Generator().manual_seed(0), **shape)
    data = _prepare(inputs, dtype, device)
    actual = _run(op, data, kwargs, "triton")
    # the yardstick: the reference in fp32 on exactly the values the kernel saw
    expected = _run(op, _prepare(data, torch.float32, device), kwargs, "reference")
    names = ["output"] + [f"grad[{i}]" for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    tol = TOLERANCE[dtype]
    for name, a, e in zip(names, actual, expected):
        assert a is not None and e is not None, f"{op.name}/{case}: {name} has no gradient"
        assert a.shape == e.shape and a.dtype == (e.dtype if dtype == torch.float32 else dtype), (name, a.shape, a.dtype)
        scale = max(1.0, float(e.detach().abs().max())) if e.numel() else 1.0
        torch.testing.assert_close(a.float(), e.float(), rtol=tol, atol=tol * scale,
                                   msg=lambda m: f"{op.name}/{case}/{dtype} {name}: {m}")


CPU_CASES = [pytest.param(op, case, shape, dtype, id=f"{op.name}-{case}-{str(dtype)[6:]}")
             for op in REGISTRY for case, shape in op.cpu_cases.items()
             for dtype in (torch.float32, torch.bfloat16) if dtype == torch.float32 or case in op.bf16_cases]

GPU_CASES = [pytest.param(op, case, shape, dtype, id=f"{op.name}-{case}-{str(dtype)[6:]}")
             for op in REGISTRY for case, shape in op.gpu_cases.items() for dtype in (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize("op, case, shape, dtype", CPU_CASES)
def test_triton_matches_reference(op, case, shape, dtype):
    device = default_device()
    if device is None:
        pytest.skip("Triton needs CUDA or TRITON_INTERPRET=1")
    check(op, case, shape, dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("op, case, shape, dtype", GPU_CASES)
def test_triton_matches_reference_on_gpu(op, case, shape, dtype):
    if not torch.cuda.is_available() or interpreting():
        pytest.skip("needs CUDA with compiled Triton kernels (TRITON_INTERPRET unset)")
    prior = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False        # the reference's matmuls in IEEE fp32, as the kernels
    try:
        check(op, case, shape, dtype, "cuda")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prior
