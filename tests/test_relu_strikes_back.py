"""ReLU Strikes Back (issue #47): sparsity measures against independent forms, relufication, the sparse FFN."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from common.nn.gpt import GPT, GPTConfig, ffn_activation_modules, record_ffn
from methods.relu_strikes_back import (ShiftedReLU, activation_sparsity, aggregated_sparsity, ffn_flops, lm_metrics,
                                       relufy, shuffled_aggregated_sparsity, sparse_ffn, uniform_aggregated_sparsity)

SMALL = dict(vocab_size=29, n_positions=16, n_embd=16, n_layer=2, n_head=2, n_inner=48)


def sparse_acts(shape, p=0.7, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g, dtype=torch.float64)
    return a * (torch.rand(shape, generator=g, dtype=torch.float64) > p)


def test_activation_sparsity_against_numpy():
    a = sparse_acts((3, 5, 7))
    ref = float(np.mean(np.abs(a.numpy()) <= 0.0))
    assert activation_sparsity(a) == pytest.approx(ref)
    assert activation_sparsity(a[0]) == pytest.approx(float(np.mean(a[0].numpy() == 0)))
    assert activation_sparsity(a, threshold=0.5) == pytest.approx(float(np.mean(np.abs(a.numpy()) <= 0.5)))
    with pytest.raises(ValueError, match="threshold"):
        activation_sparsity(a, threshold=-0.1)
    for bad in (torch.zeros(4), torch.zeros(1, 2, 3, 4), torch.zeros(0, 3)):
        with pytest.raises(ValueError):
            activation_sparsity(bad)


def test_aggregated_sparsity_against_a_loop():
    a = sparse_acts((4, 6, 9), p=0.8)
    out = aggregated_sparsity(a)
    assert out.dtype == torch.float64 and out.shape == (6,)
    for t in range(6):
        per_seq = []
        for b in range(4):
            zero_all = [all(float(a[b, tau, j]) == 0 for tau in range(t + 1)) for j in range(9)]
            per_seq.append(sum(zero_all) / 9)
        assert float(out[t]) == pytest.approx(sum(per_seq) / 4)
    assert torch.equal(aggregated_sparsity(a[1]), aggregated_sparsity(a[1:2]))
    assert bool((out[1:] <= out[:-1]).all())                          # non-increasing in t


def test_shuffled_control_equals_explicit_permutation():
    a = sparse_acts((3, 5, 8), p=0.6)
    perm = torch.randperm(15, generator=torch.Generator().manual_seed(4))
    explicit = a.reshape(15, 8)[perm].reshape(3, 5, 8)
    assert torch.equal(shuffled_aggregated_sparsity(a, seed=4), aggregated_sparsity(explicit))
    # a sequence that reuses one set of neurons keeps them free; shuffling across sequences spends them
    reuse = torch.zeros(4, 6, 12)
    for b in range(4):
        reuse[b, :, 3 * b:3 * b + 3] = 1.0
    assert float(aggregated_sparsity(reuse)[-1]) == pytest.approx(0.75)
    assert float(shuffled_aggregated_sparsity(reuse, seed=0)[-1]) < 0.75


def test_uniform_closed_form_by_product_and_monte_carlo():
    a = sparse_acts((2, 4, 10), p=0.7, seed=1)
    k = (a != 0).sum(-1).double()
    by_product = torch.tensor([np.mean([math.prod(1 - float(k[b, tau]) / 10 for tau in range(t + 1)) for b in range(2)])
                               for t in range(4)], dtype=torch.float64)
    got = uniform_aggregated_sparsity(a)
    assert torch.allclose(got, by_product)
    rng = np.random.default_rng(0)   # draw k_tau active neurons uniformly, count neurons never drawn
    draws = 4000
    mc = np.zeros(4)
    for b in range(2):
        for _ in range(draws // 2):
            free = np.ones(10, bool)
            for t in range(4):
                free[rng.choice(10, int(k[b, t]), replace=False)] = False
                mc[t] += free.mean()
    assert np.allclose(mc / draws, got.numpy(), atol=0.025)


def test_shifted_relu():
    x = torch.linspace(-2, 2, 41)[None]
    assert torch.equal(ShiftedReLU()(x), torch.relu(x))
    assert torch.allclose(ShiftedReLU(0.5)(x), torch.clamp(x - 0.5, min=0))
    assert ShiftedReLU(0.5).shift == 0.5
    assert activation_sparsity(ShiftedReLU(0.5)(x)) > activation_sparsity(torch.relu(x))


def test_relufy_stage1_equals_gpt_built_with_relu():
    torch.manual_seed(0)
    gelu = GPT(GPTConfig(activation_function="gelu", **SMALL)).eval()
    relu = GPT(GPTConfig(activation_function="relu", **SMALL)).eval()
    relu.load_state_dict(gelu.state_dict())
    x = torch.randint(0, SMALL["vocab_size"], (2, 12))
    assert relufy(gelu, stage=1) is gelu
    assert all(isinstance(m, ShiftedReLU) for m in ffn_activation_modules(gelu))
    with torch.no_grad():
        assert torch.allclose(gelu(x).logits, relu(x).logits, atol=1e-6)
    with pytest.raises(ValueError, match="stage"):
        relufy(gelu, stage=3)


def test_relufy_stage2_inputs_are_nonnegative():
    torch.manual_seed(0)
    m = relufy(GPT(GPTConfig(activation_function="gelu", **SMALL)).eval(), stage=2)
    seen = []
    hooks = [mod.register_forward_pre_hook(lambda _m, a: seen.append(a[0]))
             for n, mod in m.named_modules() if n.endswith(("attn.c_attn", "mlp.c_fc"))]
    with torch.no_grad():
        m(torch.randint(0, SMALL["vocab_size"], (2, 12)))
    for h in hooks:
        h.remove()
    assert len(seen) == 4 and all(bool((s >= 0).all()) for s in seen)
    assert all(float((s == 0).double().mean()) > 0.2 for s in seen)
    assert isinstance(m.transformer.ln_f, nn.LayerNorm)               # the final norm is left alone
    metrics = lm_metrics(m, torch.randint(0, SMALL["vocab_size"], (4, 16)), d_model=16, agg_t=8, batch_size=2)
    assert metrics["qkv_input_sparsity"] > 0.2


def test_hf_llama_relufied():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    x = torch.randint(0, 40, (2, 10))
    with record_ffn(model) as recs, torch.no_grad():
        model(x)
    assert len(recs) == 2 and activation_sparsity(recs[0][0]) == 0.0     # SiLU: no exact zeros
    relufy(model, stage=2)
    assert all(isinstance(layer.mlp.act_fn, ShiftedReLU) for layer in model.model.layers)
    assert isinstance(model.model.layers[0].input_layernorm, nn.Sequential)
    with record_ffn(model) as recs, torch.no_grad():
        model(x)
    assert activation_sparsity(recs[0][0]) > 0.2
    gate, up, down = (getattr(model.model.layers[0].mlp, k) for k in ("gate_proj", "up_proj", "down_proj"))
    h = torch.randn(3, 5, 16)
    with torch.no_grad():
        dense = model.model.layers[0].mlp(h)
        assert torch.allclose(sparse_ffn(h, up, model.model.layers[0].mlp.act_fn, down, gate=gate), dense, atol=1e-6)


@pytest.mark.parametrize("gated", [False, True])
def test_sparse_ffn_equals_dense(gated):
    torch.manual_seed(0)
    d, inner = 12, 40
    up, down = nn.Linear(d, inner).double(), nn.Linear(inner, d).double()
    gate = nn.Linear(d, inner, bias=False).double() if gated else None
    with torch.no_grad():
        first = gate if gated else up
        first.weight[: inner // 2] = -first.weight[: inner // 2].abs()   # half the neurons never fire on x >= 0
        if first.bias is not None:
            first.bias[: inner // 2] = -1.0
    act = ShiftedReLU(0.1)
    x = torch.rand(4, 7, d, dtype=torch.float64)
    dense = down(act(gate(x)) * up(x)) if gated else down(act(up(x)))
    out = sparse_ffn(x, up, act, down, gate=gate)
    assert torch.allclose(out, dense, atol=1e-12)


def test_ffn_flops_by_hand():
    a = torch.zeros(2, 3, 10)
    a[0, 0, :4] = 1.0
    a[1, 2, 5] = 2.0
    n, d = 6, 8
    f = ffn_flops(a, d)
    assert f["dense"] == 2 * 2 * n * d * 10
    assert f["sparse"] == 2 * n * d * 10 + 2 * d * 5
    g = ffn_flops(a, d, gated=True)
    assert g["dense"] == 2 * 3 * n * d * 10 and g["sparse"] == 2 * n * d * 10 + 2 * 2 * d * 5
    assert f["ratio"] == f["sparse"] / f["dense"]
    with pytest.raises(ValueError):
        ffn_flops(torch.zeros(5), d)
