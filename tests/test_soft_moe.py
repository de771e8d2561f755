"""Soft MoE: the layer against explicit loops, its three properties, and every router's shapes."""
import contextlib

import pytest
import torch
import torch.nn.functional as F

from methods.soft_moe import ROUTERS, ExpertsChoice, MoEViT, SoftMoE, TokensChoice


def slow_soft_moe(layer: SoftMoE, x: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 with explicit loops over images, slots, experts and tokens."""
    b, m, d = x.shape
    n, p = layer.n, layer.p
    phi = layer.phi / layer.phi.norm(dim=0, keepdim=True)
    out = torch.zeros_like(x)
    e = layer.experts
    for bi in range(b):
        xn = x[bi] / x[bi].norm(dim=1, keepdim=True)
        logits = torch.stack([torch.stack([layer.scale * (xn[i] @ phi[:, j]) for j in range(n * p)]) for i in range(m)])
        slots_out = []
        for j in range(n * p):
            w = torch.exp(logits[:, j]) / torch.exp(logits[:, j]).sum()       # softmax over tokens
            slot_in = sum(w[i] * x[bi, i] for i in range(m))
            k = j // p                                                        # expert of slot j
            h = F.gelu(slot_in @ e.w1[k] + e.b1[k])
            slots_out.append(h @ e.w2[k] + e.b2[k])
        for i in range(m):
            c = torch.exp(logits[i]) / torch.exp(logits[i]).sum()             # softmax over slots
            out[bi, i] = sum(c[j] * slots_out[j] for j in range(n * p))
    return out


@pytest.fixture
def layer():
    torch.manual_seed(0)
    moe = SoftMoE(dim=6, num_experts=3, slots_per_expert=2, hidden_dim=5).double()
    with torch.no_grad():
        moe.scale.fill_(1.7)
        for b in (moe.experts.b1, moe.experts.b2):
            b.normal_()
    return moe


def test_matches_slow_loops(layer):
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(x), slow_soft_moe(layer, x))


def test_weights_shapes_and_normalisation(layer):
    x = torch.randn(4, 7, 6, dtype=torch.float64)
    y, dispatch, combine = layer(x, return_weights=True)
    assert y.shape == x.shape and dispatch.shape == combine.shape == (4, 7, 6)
    torch.testing.assert_close(dispatch.sum(1), torch.ones(4, 6, dtype=torch.float64))   # columns of D
    torch.testing.assert_close(combine.sum(2), torch.ones(4, 7, dtype=torch.float64))    # rows of C


def test_output_independent_of_batch_mates(layer):
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(x)[1:2], layer(x[1:2]))
    x2 = x.clone()
    x2[0] = torch.randn(5, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(x2)[1:], layer(x)[1:])


def test_permutation_equivariant_over_tokens(layer):
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    perm = torch.randperm(9)
    torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm])


def test_gradients_reach_phi_and_scale(layer):
    layer(torch.randn(2, 5, 6, dtype=torch.float64)).sum().backward()
    assert layer.phi.grad.abs().sum() > 0 and layer.scale.grad.abs() > 0


@pytest.mark.parametrize("kind", ["uniform", "identity"])
def test_ablation_routing(kind):
    moe = SoftMoE(dim=4, num_experts=3, slots_per_expert=2, dispatch=kind, combine=kind)
    _, dispatch, combine = moe(torch.randn(2, 6, 4), return_weights=True)
    if kind == "uniform":
        assert torch.allclose(dispatch, torch.full_like(dispatch, 1 / 6))
    else:
        assert torch.equal(dispatch[0], torch.eye(6)) and torch.equal(combine[1], torch.eye(6))
    with pytest.raises(ValueError) if kind == "identity" else contextlib.nullcontext():
        moe(torch.randn(2, 5, 4))


def test_tokens_choice_capacity_and_dropped_count():
    torch.manual_seed(0)
    tc = TokensChoice(dim=8, num_experts=4, capacity_factor=1.0)
    with torch.no_grad():  # route every token to expert 0: only capacity = 8/4 = 2 survive per image
        tc.router.weight.zero_()
        tc.router.weight[0].fill_(1.0)
    x = torch.rand(3, 8, 8) + 0.1
    y = tc(x)
    kept_rows = (y.abs().sum(-1) > 0).sum(1)
    assert kept_rows.tolist() == [2, 2, 2]
    assert tc.dropped.item() == pytest.approx(1 - 2 / 8)
    assert tc.aux_loss.item() == pytest.approx(4 * 1.0 * tc.router(x).softmax(-1)[..., 0].mean().item(), rel=1e-5)


def test_tokens_choice_keeps_highest_gates():
    tc = TokensChoice(dim=2, num_experts=2, capacity_factor=0.5)   # capacity 1 of 4 tokens per expert
    with torch.no_grad():
        tc.router.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    x = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [2.0, 0.0], [0.5, 0.0]]])   # all prefer expert 0; token 1 has the top gate
    y = tc(x)
    assert (y[0].abs().sum(-1) > 0).tolist() == [False, True, False, False]


def test_experts_choice_capacity():
    ec = ExpertsChoice(dim=8, num_experts=4, capacity_factor=1.0)
    y = ec(torch.randn(2, 8, 8))
    assert y.shape == (2, 8, 8) and 0.0 <= ec.dropped.item() < 1.0


@pytest.mark.parametrize("router", ROUTERS)
def test_every_router_in_the_vit(router):
    model = MoEViT(img_size=28, in_chans=1, num_classes=10, router=router, patch_size=7, dim=16, depth=2, heads=2,
                   moe_blocks=1, num_experts=4, slots_per_expert=4)
    images = torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8)
    loss, logs = model.training_step((images, torch.tensor([0, 1, 2])))
    loss.backward()
    assert model(images).shape == (3, 10) and torch.isfinite(loss)
    assert ("dropped" in logs) == (router in ("tokens_choice", "experts_choice"))
