"""Dispatch (impl = reference | triton | auto), input validation, and the import rule that
only common/kernels imports triton, lazily."""
from __future__ import annotations

import ast

import pytest
import torch

import common.kernels as kernels
from common.kernels import KernelUnavailable, resolve_impl
from tests.conftest import ROOT
from tests.kernels.kernel_registry import REGISTRY


def test_resolve_impl(monkeypatch):
    with pytest.raises(ValueError, match="'fast'"):
        resolve_impl("fast", "cpu")
    assert resolve_impl("reference", "cuda") == "reference"
    assert resolve_impl("auto", "cpu") == "reference"                 # also under the interpreter
    monkeypatch.setattr(kernels, "triton_installed", lambda: True)
    assert resolve_impl("auto", "cuda") == "triton"
    assert resolve_impl("triton", "cuda") == "triton"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KernelUnavailable, match="needs CUDA tensors"):
        resolve_impl("triton", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_impl("triton", "cpu") == "triton"
    monkeypatch.setattr(kernels, "triton_installed", lambda: False)
    assert resolve_impl("auto", "cuda") == "reference"
    with pytest.raises(KernelUnavailable, match="pip install triton"):
        resolve_impl("triton", "cuda")


@pytest.mark.parametrize("op", REGISTRY, ids=lambda op: op.name)
def test_every_op_dispatches(op):
    inputs, kwargs = op.build(torch.Generator().manual_seed(0), **next(iter(op.cpu_cases.values())))
    with pytest.raises(ValueError, match="kernel impl"):
        op.fn(*inputs, impl="cuda", **kwargs)
    torch.testing.assert_close(op.fn(*inputs, impl="auto", **kwargs), op.fn(*inputs, **kwargs), rtol=0, atol=0)


def test_bad_inputs_get_a_clear_error():
    from common.kernels.periodic_attention import periodic_attention
    from common.kernels.sampled_linear import sampled_weight_grad
    from common.kernels.segment import segment_softmax, segment_sum
    from common.kernels.soft_moe import soft_moe

    q = torch.zeros(3, 2, 4)
    edges = torch.tensor([0, 1]), torch.tensor([1, 2]), torch.ones(2)
    with pytest.raises(ValueError, match="inv_sigma2"):
        periodic_attention(q, q, q, torch.ones(3), *edges)
    with pytest.raises(ValueError, match="int64"):
        periodic_attention(q, q, q, torch.ones(3, 2), edges[0].int(), *edges[1:])
    with pytest.raises(ValueError, match="W_E"):
        periodic_attention(q, q, q, torch.ones(3, 2), *edges, torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match="offsets\\[-1\\]"):
        segment_sum(torch.zeros(5, 2), torch.tensor([0, 2, 4]))
    with pytest.raises(ValueError, match="int64"):
        segment_softmax(torch.zeros(4), torch.tensor([0, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="weight"):
        segment_sum(torch.zeros(4, 2), torch.tensor([0, 4]), weight=torch.ones(3))
    with pytest.raises(ValueError, match="multiple"):
        soft_moe(torch.zeros(1, 2, 4), torch.zeros(4, 5), torch.ones(()), torch.zeros(2, 4, 3), torch.zeros(2, 3),
                 torch.zeros(2, 3, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="keep_prob"):
        sampled_weight_grad(torch.zeros(4, 2), torch.zeros(4, 3), torch.tensor([0]), torch.ones(3))


def _imports(path):
    """(modules imported at module level, modules imported anywhere in the file)."""
    tree = ast.parse(path.read_text())

    def names(nodes):
        out = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
        return out
    return names(tree.body), names(ast.walk(tree))


def test_only_the_kernel_files_import_triton():
    """triton is imported by common/kernels/triton_common.py and the ops' triton.py files; an
    op's __init__.py imports its triton.py inside the function (lazily); nothing else does."""
    for path in [*(ROOT / "methods").rglob("*.py"), *(ROOT / "common").rglob("*.py")]:
        rel = path.relative_to(ROOT)
        top, anywhere = _imports(path)
        in_kernels = rel.parts[:2] == ("common", "kernels")
        if in_kernels and path.name in ("triton.py", "triton_common.py"):
            continue
        if in_kernels and path.name == "__init__.py":
            assert not any("triton" in m for m in top), f"{rel} imports triton at module level"
        else:
            assert not any("triton" in m for m in anywhere), f"{rel} imports triton"
