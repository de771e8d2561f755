"""Compile every Triton kernel of common/kernels for a CUDA GPU on a machine without one.

    python scripts/check_kernel_compile.py [--arch 90] [--ops soft_moe ...]

Runs each registered op's Triton forward and backward (tests/kernels/kernel_registry.py, at
its GPU shapes, fp32 and bf16) on CPU tensors with a stand-in driver that reports a CUDA
target, and with kernel launches replaced by compilation only (Triton's warmup). So every
kernel specialisation goes through the real compiler down to a cubin (ptxas ships with
triton), and a compile error or an over-large shared-memory footprint shows here instead of
costing GPU time. Prints registers / shared memory / spills per kernel; exits 1 on a failure.
The numbers the ops return here are garbage (nothing runs); only compilation is checked.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHARED_LIMIT = 227 * 1024          # H100/H200 opt-in shared memory per block


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (90: H100/H200)")
    ap.add_argument("--ops", nargs="*", default=None)
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("unset TRITON_INTERPRET: this check compiles the kernels")
        return 2
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    class CompileOnlyDriver:
        """What JITFunction.run asks of a driver, for a GPU that is not there."""

        def get_current_target(self):
            return GPUTarget("cuda", args.arch, 32)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_active_torch_device(self):
            return torch.device("cpu")

    compiled = {}
    launch = JITFunction.run

    def compile_only(self, *a, grid, warmup, **kw):
        kernel = launch(self, *a, grid=grid, warmup=True, **kw)
        compiled.setdefault(self.fn.__name__, {})[kernel.hash] = kernel
        return kernel

    driver.set_active(CompileOnlyDriver())
    JITFunction.run = compile_only
    # resolve_impl refuses impl="triton" for CPU tensors unless interpreting; let it through,
    # after triton_common has bound the real `interpreting` (its dot types must be the GPU's)
    import common.kernels
    import common.kernels.triton_common  # noqa: F401

    common.kernels.interpreting = lambda: True
    from tests.kernels.kernel_registry import REGISTRY

    failures = 0
    for op in REGISTRY:
        if args.ops and op.name not in args.ops:
            continue
        for case, shape in op.gpu_cases.items():
            for dtype in (torch.float32, torch.bfloat16):
                inputs, kwargs = op.build(torch.Generator().manual_seed(0), **shape)
                inputs = [t.detach().to(dtype).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor)
                          and t.is_floating_point() else t for t in inputs]
                try:
                    out = op.fn(*inputs, impl="triton", **kwargs)
                    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
                    torch.autograd.grad(out, wrt, torch.ones_like(out), allow_unused=True)
                    print(f"ok    {op.name}/{case}/{dtype}")
                except Exception:
                    failures += 1
                    print(f"FAIL  {op.name}/{case}/{dtype}\n{traceback.format_exc()}")
    cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    for name, kernels in sorted(compiled.items()):
        for kernel in kernels.values():
            usage = ""
            if cuobjdump.exists():
                with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                    f.write(kernel.asm["cubin"])
                    f.flush()
                    out = subprocess.run([str(cuobjdump), "--dump-resource-usage", f.name],
                                         capture_output=True, text=True).stdout
                    usage = " ".join(part for line in out.splitlines() if "REG:" in line
                                     for part in line.split() if part.split(":")[0] in ("REG", "LOCAL"))
            shared = kernel.metadata.shared
            flag = "  <-- over the shared-memory limit" if shared > SHARED_LIMIT else ""
            failures += shared > SHARED_LIMIT
            print(f"{name:32s} warps={kernel.metadata.num_warps} shared={shared:7d} {usage}{flag}")
    print(f"{sum(len(k) for k in compiled.values())} kernel variants compiled for sm_{args.arch}; {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
