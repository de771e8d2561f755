"""Each kernel's reference computes exactly what the method computes (these tests pin the spec
to the method code), and a method wired to a kernel gives the same numbers with `kernels=triton`
(under TRITON_INTERPRET=1 on the CPU)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from common.kernels.periodic_attention import periodic_attention
from common.kernels.sampled_linear import sampled_weight_grad
from common.kernels.segment import offsets_from_ids, segment_mean, segment_softmax, segment_sum
from common.kernels.soft_moe import soft_moe


def crystal_batch(seed=0):
    """Two skewed cells (5 and 3 atoms) as Crystalformer's collate builds them."""
    rng = np.random.default_rng(seed)
    crystals = []
    for atoms in (5, 3):
        lattice = np.array([[4.0, 0, 0], [1.2, 3.7, 0], [0.5, 0.8, 5.1]]) + rng.normal(0, 0.1, (3, 3))
        crystals.append({"z": rng.integers(1, 30, atoms), "pos": rng.random((atoms, 3)) @ lattice,
                         "lattice": lattice, "target": 0.0})
    return crystals


def attention_inputs(mode, chunk=32768):
    from methods.crystalformer.attention import PeriodicAttention
    from methods.crystalformer.model import collate, image_edges

    torch.manual_seed(0)
    batch = collate(crystal_batch())
    edges = image_edges(batch, reach=6.0)
    att = PeriodicAttention(dim=12, heads=3, mode=mode, n_rbf=9, r_max=7.0, chunk=chunk).double()
    att.m.normal_()
    att.s.uniform_(0.5, 2.0)
    att.calibrated.fill_(True)
    x = torch.randn(len(edges["graph"]), 12, dtype=torch.float64, requires_grad=True)
    return att, x, edges


def test_periodic_attention_reference_is_the_methods_attention():
    for mode, chunk in (("full", 32768), ("full", 50), ("simplified", 32768)):    # chunk 50: checkpointed sums
        att, x, e = attention_inputs(mode, chunk)
        src, dst, r2 = e["src"], e["dst"], e["r2"]
        assert len(src) > 100 and bool((src[1:] >= src[:-1]).all())
        expected = att(x, src, dst, r2)
        A = x.shape[0]
        q, k, v = (f(x).view(A, att.heads, att.dk) for f in (att.q, att.k, att.v))
        y = periodic_attention(q, k, v, att.inv_sigma2(q), src, dst, r2, getattr(att, "W_E", None), r_max=att.r_max)
        got = att.out(y.reshape(A, att.dim))
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
        g = torch.randn_like(expected)
        params = [x, att.q.weight, att.w] + ([att.W_E] if mode == "full" else [])
        for a, b in zip(torch.autograd.grad(got, params, g), torch.autograd.grad(expected, params, g)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["full", "simplified"])
def test_crystalformer_with_triton_kernels_matches_its_reference_path(mode):
    """hardware.kernels=triton routes Crystalformer's attention through the fused kernel: the
    whole model's predictions and parameter gradients match the reference path (fp32)."""
    from methods.crystalformer.model import Crystalformer, collate

    batch = collate(crystal_batch())
    torch.manual_seed(0)
    ref = Crystalformer(dim=16, depth=2, heads=2, ffn=32, mode=mode, n_rbf=8, r_max=7.0, cover_sigmas=2.0)
    tri = Crystalformer(dim=16, depth=2, heads=2, ffn=32, mode=mode, n_rbf=8, r_max=7.0, cover_sigmas=2.0,
                        kernels="triton")
    tri.load_state_dict(ref.state_dict())
    for model in (ref, tri):
        model.eval()                                   # no calibration of m, s: same buffers in both
    out_ref, out_tri = ref(batch), tri(batch)
    torch.testing.assert_close(out_tri, out_ref, rtol=1e-4, atol=1e-5)
    out_ref.sum().backward()
    out_tri.sum().backward()
    for (name, a), b in zip(tri.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_segment_softmax_and_mean_are_crystalformers_group_softmax_and_pooling():
    from methods.crystalformer.attention import group_softmax

    _, x, e = attention_inputs("full")
    scores = torch.randn(len(e["src"]), 3, dtype=torch.float64)
    A = x.shape[0]
    torch.testing.assert_close(segment_softmax(scores, offsets_from_ids(e["src"], A)), group_softmax(scores, e["src"], A))
    graph, counts = e["graph"], torch.tensor([[5], [3]])
    pooled = x.new_zeros(2, x.shape[1]).index_add(0, graph, x) / counts       # Crystalformer.forward's pooling
    torch.testing.assert_close(segment_mean(x, offsets_from_ids(graph, 2)), pooled)


def test_segment_sum_is_lighthgnn_smoothing():
    from methods.lighthgnn.model import HGNNSmoothing

    edges = [[0, 1, 2], [2, 3], [1, 3, 4], [0, 4, 6, 7]]                   # vertex 5: self-loop
    smooth = HGNNSmoothing(edges, 8).double()
    x = torch.randn(8, 4, dtype=torch.float64)

    def csr(coo):     # coalesced COO -> (row offsets, column index, values)
        (rows, cols), vals = coo.indices(), coo.values()
        return offsets_from_ids(rows, coo.shape[0]), cols, vals

    r_off, r_col, r_val = csr(smooth.right_t)                               # D_e⁻¹ Hᵀ D_v^{-1/2}
    l_off, l_col, l_val = csr(smooth.left)                                  # D_v^{-1/2} H
    got = segment_sum(segment_sum(x, r_off, r_col, r_val), l_off, l_col, l_val)
    torch.testing.assert_close(got, smooth(x))


def test_soft_moe_reference_is_the_methods_layer():
    from methods.soft_moe.layers import SoftMoE

    torch.manual_seed(0)
    layer = SoftMoE(dim=6, num_experts=3, slots_per_expert=2, hidden_dim=5)
    with torch.no_grad():
        layer.scale.fill_(1.7)
        layer.experts.b1.normal_()
    x = torch.randn(2, 7, 6)
    ex = layer.experts
    got = soft_moe(x, layer.phi, layer.scale, ex.w1, ex.b1, ex.w2, ex.b2)
    torch.testing.assert_close(got, layer(x), rtol=1e-6, atol=1e-6)


def test_sampled_weight_grad_reference_is_samplew():
    from methods.vcas.sampling import SampledLinear, SamplingState, water_fill

    torch.manual_seed(0)
    lin = nn.Linear(7, 5)
    lin.__class__ = SampledLinear
    lin.state, lin.layer = SamplingState(1, nu=[0.5], generator=torch.Generator().manual_seed(3)), 0
    x = torch.randn(4, 6, 7)
    gz = torch.randn(4, 6, 5)
    lin(x).backward(gz)
    gz2, x2 = gz.reshape(-1, 5), x.reshape(-1, 7)
    q = water_fill((gz2.pow(2).sum(1) * x2.pow(2).sum(1)).sqrt(), 0.5 * len(gz2))     # the same draw, replayed
    rows = (torch.rand(q.shape, generator=torch.Generator().manual_seed(3)) < q).nonzero().squeeze(1)
    assert 0 < len(rows) < len(q)
    torch.testing.assert_close(lin.weight.grad, sampled_weight_grad(gz2, x2, rows, q))
    assert not torch.allclose(lin.weight.grad, gz2.t() @ x2)                          # it did sample


def _needs_interpreter():
    pytest.importorskip("triton")
    from common.kernels import interpreting

    if not torch.cuda.is_available() and not interpreting():
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest.py without CUDA)")
    return "cuda" if torch.cuda.is_available() else "cpu"


def test_soft_moe_layer_with_triton_kernels_matches_its_reference_path():
    """hardware.kernels=triton routes the Soft MoE layer through the fused kernel: output, input
    gradient and every parameter gradient match the reference path, on odd shapes (tokens and
    slots not multiples of the blocks, p > 1); `auto` off CUDA is the reference path, bit for bit."""
    from methods.soft_moe.layers import SoftMoE

    dev = _needs_interpreter()
    torch.manual_seed(0)
    kw = dict(dim=10, num_experts=3, slots_per_expert=3, hidden_dim=7, scale_init=1.9)
    ref = SoftMoE(**kw).to(dev)
    with torch.no_grad():
        ref.experts.b1.normal_()
        ref.experts.b2.normal_()
    x = torch.randn(3, 37, 10, device=dev)
    g = torch.randn_like(x)
    out = {}
    for impl in ("reference", "triton", "auto"):
        layer = SoftMoE(**kw, kernels=impl).to(dev)
        layer.load_state_dict(ref.state_dict())
        xi = x.clone().requires_grad_()
        y = layer(xi)
        params = [layer.phi, layer.scale, *layer.experts.parameters()]
        out[impl] = (y, *torch.autograd.grad((y * g).sum(), [xi, *params]))
    for a, b in zip(out["triton"], out["reference"]):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5)
    if dev == "cpu":
        for a, b in zip(out["auto"], out["reference"]):
            assert torch.equal(a, b)


def _vcas_blocks(kernels, seed=0):
    """Two blocks of odd-width linears (11 -> 13 -> 11) under VCAS with SampleA and SampleW on."""
    from methods.vcas.sampling import install

    torch.manual_seed(0)
    blocks = nn.Sequential(*[nn.Sequential(nn.Linear(11, 13), nn.GELU(), nn.Linear(13, 11)) for _ in range(2)])
    state = install(blocks, generator=torch.Generator().manual_seed(seed), kernels=kernels)
    state.rho, state.nu = [0.6, 0.8], [0.5, 0.3, 0.7, 0.45]
    return blocks, state


def test_vcas_sampled_linear_with_triton_kernel_matches_its_reference_path():
    """hardware.kernels=triton computes SampleW's ∇W on the gathering kernel: with the same
    draws (same generator), the output, the input gradient and every weight and bias gradient
    match the reference path; `auto` off CUDA is the reference path, bit for bit."""
    dev = _needs_interpreter()
    x = torch.randn(5, 7, 11, device=dev)
    x[:2] *= 3                                         # unequal norms: water-filling is not uniform
    g = torch.randn_like(x)
    out = {}
    for impl in ("reference", "triton", "auto"):
        blocks, state = _vcas_blocks(impl)
        blocks.to(dev)
        xi = x.clone().requires_grad_()
        y = blocks(xi)
        out[impl] = (y, *torch.autograd.grad((y * g).sum(), [xi, *blocks.parameters()]))
        assert state.skipped_flops > 0, "SampleA and SampleW dropped rows"
    blocks, state = _vcas_blocks("reference")
    state.active = False                               # plain linears: the exact gradient
    exact = torch.autograd.grad((blocks.to(dev)(x) * g).sum(), [*blocks.parameters()])
    assert not torch.allclose(out["reference"][2], exact[0]), "the first weight gradient is sampled"
    for a, b in zip(out["triton"], out["reference"]):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5)
    if dev == "cpu":
        for a, b in zip(out["auto"], out["reference"]):
            assert torch.equal(a, b)
