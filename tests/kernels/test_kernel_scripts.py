"""The GPU-side scripts behave on a machine without CUDA, and every kernel compiles for sm_90."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


def _run(cmd, env_extra=None, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | (env_extra or {})
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@no_cuda
def test_benchmark_needs_cuda_and_exits_0():
    out = _run([sys.executable, "benchmarks/gpu_kernels.py"])
    assert out.returncode == 0 and "needs CUDA" in out.stdout, out.stdout + out.stderr


@no_cuda
def test_gpu_check_needs_cuda_and_exits_0():
    out = _run(["bash", "scripts/gpu_check.sh"], {"PYTHON": sys.executable})
    assert out.returncode == 0 and "needs CUDA" in out.stdout, out.stdout + out.stderr


@pytest.mark.slow
def test_every_kernel_compiles_for_sm90():
    pytest.importorskip("triton")
    out = _run([sys.executable, "scripts/check_kernel_compile.py"], timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "0 failures" in out.stdout
