"""Soft MoE: the layer against explicit loops, its three properties, and every router's shapes."""
import contextlib
import math
import os

import pytest
import torch
import torch.nn.functional as F

from methods.soft_moe import ROUTERS, ExpertsChoice, MoEViT, SoftMoE, TokensChoice, normalised_entropy


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


def test_normalised_entropy_by_hand():
    w = torch.tensor([[[0.5, 1.0, 0.2], [0.5, 0.0, 0.8]]])            # (1, m=2, s=3); columns sum to 1
    per_slot = [-(0.5 * math.log(0.5)) * 2, 0.0, -(0.2 * math.log(0.2) + 0.8 * math.log(0.8))]
    assert normalised_entropy(w, axis=1).item() == pytest.approx(sum(per_slot) / 3 / math.log(2), rel=1e-6)
    rows = torch.tensor([[[0.25, 0.25, 0.5], [1.0, 0.0, 0.0]]])       # rows sum to 1
    h0 = -(2 * 0.25 * math.log(0.25) + 0.5 * math.log(0.5))
    assert normalised_entropy(rows, axis=2).item() == pytest.approx(h0 / 2 / math.log(3), rel=1e-6)
    assert normalised_entropy(torch.full((2, 4, 5), 0.25), axis=1).item() == pytest.approx(1.0)


def test_scale_init_sqrt_d_gives_algorithm_1_logits_at_init():
    """Algorithm 1's logits X·Φ, with LayerNorm'd tokens (norm √d) and unit columns of Φ, equal the
    normalised logits with scale √d."""
    torch.manual_seed(0)
    d = 16
    layer = SoftMoE(dim=d, num_experts=4, slots_per_expert=2, scale_init=math.sqrt(d)).double()
    x = F.layer_norm(torch.randn(3, 5, d, dtype=torch.float64), (d,), eps=0.0)   # rows of norm √d
    dispatch, combine = layer.weights(x)
    logits = x @ (layer.phi / layer.phi.norm(dim=0))
    torch.testing.assert_close(dispatch, logits.softmax(1))
    torch.testing.assert_close(combine, logits.softmax(2))


@pytest.mark.parametrize("cls", [TokensChoice, ExpertsChoice])
def test_routing_groups_route_the_images_tokens_together(cls):
    """group_size = g routes g images' tokens as one sequence: the same as group_size 1 on the
    concatenated tokens; a batch that is not a multiple of g routes its rest as one smaller group."""
    torch.manual_seed(0)
    grouped = cls(dim=6, num_experts=4, capacity_factor=1.0, hidden_dim=5, group_size=3)
    single = cls(dim=6, num_experts=4, capacity_factor=1.0, hidden_dim=5, group_size=1)
    single.load_state_dict(grouped.state_dict())
    x = torch.randn(8, 4, 6)                                          # 2 groups of 3 images, then 2 images
    y = grouped(x)
    by_hand = torch.cat([single(x[:6].reshape(2, 12, 6)).reshape(6, 4, 6), single(x[6:].reshape(1, 8, 6)).reshape(2, 4, 6)])
    torch.testing.assert_close(y, by_hand)
    torch.testing.assert_close(single(x), torch.cat([single(x[i:i + 1]) for i in range(8)]))   # group 1: image by image


def test_bigger_groups_drop_fewer_tokens():
    """16 tokens over 16 experts at capacity factor 1: one image per group gives each expert one
    place and drops many tokens; 8 images per group pool the capacity (V-MoE's setting)."""
    torch.manual_seed(0)
    tc = TokensChoice(dim=8, num_experts=16, capacity_factor=1.0, group_size=1)
    x = torch.randn(64, 16, 8)
    tc(x)
    dropped_single = tc.dropped.item()
    tc.group_size = 8
    tc(x)
    assert dropped_single > 0.3 and tc.dropped.item() < dropped_single - 0.1


def test_bad_group_size_and_kernels():
    with pytest.raises(ValueError, match="group_size"):
        TokensChoice(dim=4, num_experts=2, group_size=0)
    with pytest.raises(ValueError, match="kernels must be one of"):
        SoftMoE(dim=4, num_experts=2, kernels="cuda")


@pytest.mark.parametrize("router, entropy", [("soft", None), ("uniform", 1.0), ("identity", 0.0)])
def test_routing_stats_per_block(router, entropy):
    model = MoEViT(img_size=28, in_chans=1, num_classes=10, router=router, patch_size=7, dim=16, depth=3, heads=2,
                   moe_blocks=2, num_experts=4, slots_per_expert=4, scale_init=2.5)
    stats = model.routing_stats(torch.randint(0, 256, (5, 1, 28, 28), dtype=torch.uint8))
    assert sorted(stats) == sorted(f"{k}_b{i}" for i in (1, 2) for k in ("scale", "dispatch_entropy", "combine_entropy"))
    assert stats["scale_b1"] == pytest.approx(2.5)
    for i in (1, 2):
        for kind in ("dispatch", "combine"):
            value = stats[f"{kind}_entropy_b{i}"]
            assert value == pytest.approx(entropy, abs=1e-6) if entropy is not None else 0.0 < value < 1.0


def test_validation_split_is_carved_from_train(monkeypatch):
    """method.val_size = N: N train images held out (disjoint from what is trained on), test unread."""
    from omegaconf import OmegaConf

    import methods.soft_moe as sm

    ids = torch.arange(50)
    monkeypatch.setattr(sm.data, "image_splits", lambda ds: {"train": (ids.clone(), ids.clone()),
                                                             "test": (-ids, -ids)})
    cfg = OmegaConf.create({"dataset": {}, "method": {"val_size": 12}})
    (tx, _), (vx, vy), split = sm.train_and_eval_splits(cfg)
    assert split == "val" and len(vx) == 12 and len(tx) == 38
    assert sorted(torch.cat([tx, vx]).tolist()) == list(range(50)) and torch.equal(vx, vy)
    cfg.method.val_size = None
    assert sm.train_and_eval_splits(cfg)[2] == "test"
    cfg.method.val_size = 50
    with pytest.raises(ValueError, match="val_size"):
        sm.train_and_eval_splits(cfg)


def test_triton_kernel_path_equals_the_layer():
    """kernels="triton" (fused routing, Triton's CPU interpreter here) gives the reference
    layer's output and gradients."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available():   # before the first kernel import: triton.jit reads it then
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from common.kernels import interpreting

    if not torch.cuda.is_available() and not interpreting():
        pytest.skip("TRITON_INTERPRET is set to 0 here")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    ref = SoftMoE(dim=12, num_experts=3, slots_per_expert=2, hidden_dim=10).to(dev)
    fused = SoftMoE(dim=12, num_experts=3, slots_per_expert=2, hidden_dim=10, kernels="triton").to(dev)
    fused.load_state_dict(ref.state_dict())
    x = torch.randn(2, 7, 12, device=dev)
    g = torch.randn(2, 7, 12, device=dev)
    grads = [torch.autograd.grad((m(x) * g).sum(), [m.phi, m.scale, m.experts.w1]) for m in (ref, fused)]
    torch.testing.assert_close(fused(x), ref(x), rtol=2e-5, atol=2e-5)
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=2e-5, atol=2e-5)


def _mlp_weights(model, block):
    mlp = model.vit.blocks[block].mlp
    return (mlp.experts.w1, mlp.experts.w2, mlp.experts.b1) if hasattr(mlp, "experts") else \
        (mlp.fc1.weight, mlp.fc2.weight, mlp.fc1.bias)


@pytest.mark.parametrize("router", ["dense", "soft"])
def test_mlp_init_sets_one_init_for_the_last_blocks_only(router):
    """mlp_init gives the MoE blocks' MLPs (dense or experts) one initialisation; everything else
    is what mlp_init=None builds from the same seed."""
    kw = dict(img_size=28, in_chans=1, num_classes=10, router=router, patch_size=7, dim=64, depth=4, heads=4,
              moe_blocks=2, num_experts=8)
    torch.manual_seed(0)
    base = MoEViT(**kw)
    for kind in ("timm", "fan_in"):
        torch.manual_seed(0)
        model = MoEViT(**kw, mlp_init=kind)
        for block in (2, 3):
            w1, w2, b1 = _mlp_weights(model, block)
            assert float(b1.detach().abs().max()) == 0
            for w, fan_in in ((w1, 64), (w2, 256)):
                if kind == "timm":      # N(0, 0.02²) truncated at ±2 (i.e. not at all)
                    assert abs(float(w.std()) - 0.02) < 0.002
                else:                   # U(±1/√fan_in): std bound/√3, max just under the bound
                    bound = 1 / math.sqrt(fan_in)
                    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.95 * bound
                    assert abs(float(w.std()) - bound / math.sqrt(3)) < 0.05 * bound
        names = {n for n, _ in model.named_parameters()
                 if not any(n.startswith(f"vit.blocks.{b}.mlp.") and ("fc" in n or "experts" in n) for b in (2, 3))}
        ref = dict(base.named_parameters())
        for n, p in model.named_parameters():
            if n in names:
                assert torch.equal(p, ref[n]), n
    # the default keeps each its own: dense timm's std 0.02, experts U(±1/√64) (std 0.072)
    w_default = _mlp_weights(base, 3)[0]
    assert abs(float(w_default.std()) - (0.02 if router == "dense" else 0.125 / math.sqrt(3))) < 0.005
    with pytest.raises(ValueError, match="mlp_init"):
        MoEViT(**kw, mlp_init="xavier")
