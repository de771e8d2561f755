"""The registry of kernel ops for the parity harness: each op is its public function (taking
`impl=`), an input builder and its shapes. A new op costs one `KernelOp(...)` entry here.

A builder gets a seeded CPU generator and the shape keywords, and returns (inputs, kwargs):
inputs are passed positionally; float tensors with requires_grad are differentiated, every
other input (indices, distances, probabilities) is data. The harness moves the inputs to the
device and dtype under test.

CPU shapes are tiny (the interpreter runs each program in numpy) but odd: lengths that cross
the kernels' loop steps (32 images, tokens or kept rows; up to 256 rows for the segment ops),
empty and length-1 segments, a single head, a single image, no kept row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from common.kernels.periodic_attention import periodic_attention
from common.kernels.sampled_linear import sampled_weight_grad
from common.kernels.segment import segment_mean, segment_softmax, segment_sum
from common.kernels.soft_moe import soft_moe


@dataclass(frozen=True)
class KernelOp:
    name: str
    fn: Callable
    build: Callable
    cpu_cases: dict[str, dict]
    gpu_cases: dict[str, dict] = field(default_factory=dict)
    bf16_cases: tuple[str, ...] = ("odd",)      # CPU cases also run in bf16


def _randn(gen, *shape, scale=1.0, grad=True):
    return (torch.randn(*shape, generator=gen) * scale).requires_grad_(grad)


def _offsets(lengths) -> torch.Tensor:
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.long), 0)
    return offsets


def build_periodic(gen, *, images, heads, dim, basis):
    """images[i]: how many lattice images atom i attends to (0 = none)."""
    atoms = len(images)
    src = torch.repeat_interleave(torch.arange(atoms), torch.tensor(images))
    E = len(src)
    dst = torch.randint(0, atoms, (E,), generator=gen)
    r2 = torch.rand(E, generator=gen) * 25 + 0.25                          # 0.5 .. 5 Å
    q, k, v = (_randn(gen, atoms, heads, dim) for _ in range(3))
    inv_sigma2 = (torch.rand(atoms, heads, generator=gen) * 0.5 + 0.1).requires_grad_()
    W_E = _randn(gen, heads, basis, dim, scale=0.3) if basis else None
    return (q, k, v, inv_sigma2, src, dst, r2, W_E), {"r_max": 6.0}


def _gpu_images(atoms, lo, hi, seed=0):
    return torch.randint(lo, hi, (atoms,), generator=torch.Generator().manual_seed(seed)).tolist()


def build_segment(gen, *, lengths, dim, gather_from=0, weighted=False):
    """dim None: 1-D rows; gather_from > 0: rows gathered from that many source rows by index."""
    offsets = _offsets(lengths)
    T = int(offsets[-1])
    rows = gather_from or T
    src = _randn(gen, rows) if dim is None else _randn(gen, rows, dim)
    index = torch.randint(0, gather_from, (T,), generator=gen) if gather_from else None
    weight = _randn(gen, T) if weighted else None
    return (src, offsets, index, weight), {}


def build_softmax(gen, *, lengths, heads):
    offsets = _offsets(lengths)
    T = int(offsets[-1])
    return (_randn(gen, T) if heads is None else _randn(gen, T, heads), offsets), {}


def build_soft_moe(gen, *, batch, tokens, dim, experts, slots, hidden):
    x = _randn(gen, batch, tokens, dim)
    phi = _randn(gen, dim, experts * slots, scale=dim**-0.5)
    scale = torch.tensor(1.7).requires_grad_()
    w1, b1 = _randn(gen, experts, dim, hidden, scale=dim**-0.5), _randn(gen, experts, hidden, scale=0.1)
    w2, b2 = _randn(gen, experts, hidden, dim, scale=hidden**-0.5), _randn(gen, experts, dim, scale=0.1)
    return (x, phi, scale, w1, b1, w2, b2), {}


def build_sampled(gen, *, rows, n_out, n_in, keep="random"):
    q = torch.rand(rows, generator=gen) * 0.9 + 0.1
    kept = {"random": torch.rand(rows, generator=gen) < q, "all": torch.ones(rows, dtype=torch.bool),
            "none": torch.zeros(rows, dtype=torch.bool)}[keep]
    return (_randn(gen, rows, n_out), _randn(gen, rows, n_in), kept.nonzero().squeeze(1), q), {}


REGISTRY: list[KernelOp] = [
    KernelOp("periodic_attention", periodic_attention, build_periodic,
             cpu_cases={"odd": dict(images=[37, 1, 0, 6], heads=2, dim=5, basis=6),
                        "single_head_single_image_no_psi": dict(images=[1, 1, 1], heads=1, dim=4, basis=0)},
             gpu_cases={"crystals": dict(images=_gpu_images(512, 40, 160), heads=8, dim=16, basis=64),
                        "odd": dict(images=_gpu_images(77, 0, 70, 1), heads=3, dim=12, basis=10)}),
    KernelOp("segment_sum", segment_sum, build_segment,
             cpu_cases={"odd": dict(lengths=[300, 0, 1, 5], dim=3, gather_from=7, weighted=True),
                        "plain_1d": dict(lengths=[2, 1, 300], dim=None),
                        "wide": dict(lengths=[40, 3], dim=70, weighted=True),
                        "single": dict(lengths=[1], dim=1, weighted=True)},
             gpu_cases={"spmm": dict(lengths=_gpu_images(3000, 0, 60), dim=200, gather_from=2500, weighted=True),
                        "plain": dict(lengths=_gpu_images(4000, 0, 90, 2), dim=67)}),
    KernelOp("segment_mean", segment_mean, build_segment,
             cpu_cases={"odd": dict(lengths=[300, 0, 1, 5], dim=3, gather_from=7),
                        "plain": dict(lengths=[300, 1, 0], dim=2, weighted=True)},
             gpu_cases={"pool": dict(lengths=_gpu_images(300, 1, 130, 3), dim=128)}),
    KernelOp("segment_softmax", segment_softmax, build_softmax,
             cpu_cases={"odd": dict(lengths=[300, 0, 1, 5], heads=3), "single_1d": dict(lengths=[1], heads=None)},
             gpu_cases={"edges": dict(lengths=_gpu_images(4096, 1, 200, 4), heads=8)}),
    KernelOp("soft_moe", soft_moe, build_soft_moe,
             cpu_cases={"odd": dict(batch=2, tokens=37, dim=5, experts=3, slots=2, hidden=7),
                        "single": dict(batch=1, tokens=1, dim=3, experts=1, slots=1, hidden=2)},
             gpu_cases={"s16": dict(batch=4, tokens=196, dim=384, experts=128, slots=1, hidden=1536),
                        "odd": dict(batch=3, tokens=77, dim=40, experts=5, slots=3, hidden=33)}),
    KernelOp("sampled_weight_grad", sampled_weight_grad, build_sampled,
             cpu_cases={"odd": dict(rows=100, n_out=67, n_in=37), "split_rows": dict(rows=1100, n_out=20, n_in=12),
                        "none_kept": dict(rows=3, n_out=2, n_in=1, keep="none"),
                        "single": dict(rows=1, n_out=1, n_in=1, keep="all")},
             gpu_cases={"vit_b_fc1": dict(rows=3152, n_out=3072, n_in=768), "odd": dict(rows=999, n_out=130, n_in=77)}),
]

BY_NAME = {op.name: op for op in REGISTRY}
