"""LRR's section 2, the single hidden neuron: gradients against autograd and the conservation
identity, the one-dimensional success region, LRR inheriting the sign where IMP fails, and the
batched experiment the mini table runs."""
import math

import pytest
import torch

from methods.lrr import single_neuron_compare, single_neuron_data, single_neuron_grads, single_neuron_loss, single_neuron_run


def test_single_neuron_grads_match_autograd_and_the_conservation_identity():
    x, y = single_neuron_data(200, 4, seed=0)
    a = torch.tensor([0.7, -1.2, 0.3], dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    loss = single_neuron_loss(a, w, x, y)
    ga, gw = torch.autograd.grad(loss.sum(), [a, w])
    ha, hw = single_neuron_grads(a.detach(), w.detach(), x, y)
    torch.testing.assert_close(ha, ga)
    torch.testing.assert_close(hw, gw)
    # a·∂L/∂a = wᵀ∂L/∂w, so one GD step changes a² − ‖w‖² by exactly lr²(g_a² − ‖g_w‖²)
    torch.testing.assert_close(a.detach() * ha, (w.detach() * hw).sum(1))
    lr = 0.05
    a1, w1 = a.detach() - lr * ha, w.detach() - lr * hw
    change = (a1 ** 2 - (w1 ** 2).sum(1)) - (a.detach() ** 2 - (w.detach() ** 2).sum(1))
    torch.testing.assert_close(change, lr ** 2 * (ha ** 2 - (hw ** 2).sum(1)))


def test_gradient_descent_conserves_a2_minus_w2_as_lr_shrinks():
    from methods.lrr import gradient_descent
    x, y = single_neuron_data(300, 3, seed=1)
    a0 = torch.tensor([0.8, -0.5, 1.5], dtype=torch.float64)
    w0 = torch.tensor([[0.2, -0.4, 0.1], [0.9, 0.3, -0.2], [-0.3, 0.1, 0.5]], dtype=torch.float64)
    c0 = a0 ** 2 - (w0 ** 2).sum(1)
    drift = []
    for lr in (2e-3, 1e-3):                            # the same time T = 1 of gradient flow
        a, w = gradient_descent(a0, w0, x, y, steps=round(1.0 / lr), lr=lr)
        drift.append((a ** 2 - (w ** 2).sum(1) - c0).abs().max())
        assert (a - a0).abs().max() > 0.05             # it did move
    assert drift[1] < 1e-3
    assert 1.6 < float(drift[0] / drift[1]) < 2.4       # discretisation error O(lr): halves with lr


def test_one_dimensional_success_region():
    # w(0) < 0: w never crosses 0 and the loss stays at ½·mean(relu(x)²) ≈ 0.25;
    # w(0) > 0: success iff a(0) > −w(0) (a² − w² conserved decides who reaches 0 first)
    a0 = torch.tensor([1.0, 0.3, -0.5, -1.5, 1.0, -1.0, 2.0], dtype=torch.float64)
    w0 = torch.tensor([1.0, 0.8, 1.0, 1.0, -1.0, -1.0, -0.2], dtype=torch.float64)[:, None]
    res = single_neuron_run(a0, w0, "lrr", steps=1500, lr=0.2, num_samples=300)
    want = [True, True, True, False, False, False, False]
    assert res["dense_loss"].lt(1e-3).tolist() == want
    assert res["success"].tolist() == want             # 1-D: pruning keeps the only weight
    x, y = single_neuron_data(300, 1, seed=0)
    plateau = 0.5 * float(y.pow(2).mean())              # the sample's ½·mean(relu(x)²)
    for i in (3, 4, 5, 6):
        assert float(res["loss"][i]) == pytest.approx(plateau, abs=1e-4)
    # the plateau is ¼ up to sampling: var(relu(x)²) = E relu(x)⁴ − (E relu(x)²)² = 3/2 − 1/4
    assert abs(plateau - 0.25) < 4 * 0.5 * math.sqrt(1.25 / 300)


def test_lrr_inherits_the_sign_where_imp_fails():
    # d > 1, a(0) > 0, w₁(0) < 0: dense training turns w₁ positive and the mask finds x₁;
    # IMP restarts from w₁(0) < 0 and fails, LRR keeps the trained sign and succeeds
    a0 = torch.tensor([1.0], dtype=torch.float64)
    w0 = torch.tensor([[-0.3, 0.2, 0.1, -0.1, 0.05]], dtype=torch.float64)
    out = single_neuron_compare(a0, w0, ("imp", "lrr"), steps=1000, lr=0.2, num_samples=300)
    assert out["lrr"]["mask_correct"].all() and out["lrr"]["mask"][0].tolist() == [True, False, False, False, False]
    assert out["imp"]["loss"][0] > 0.2 and not out["imp"]["success"][0]
    assert out["lrr"]["success"][0] and out["lrr"]["w"][0, 0] > 0
    single = single_neuron_run(1.0, [-0.3, 0.2, 0.1, -0.1, 0.05], "imp", steps=10)
    assert single["mask"].shape == (5,) and single["loss"].dim() == 0
    with pytest.raises(ValueError, match="method"):
        single_neuron_run(1.0, [0.1], "snip")
    with pytest.raises(ValueError, match="w0"):
        single_neuron_run(torch.ones(2), torch.ones(3, 4), "lrr")


def test_single_neuron_experiment_reports_shares_of_the_batched_runs():
    from methods.lrr import single_neuron_experiment
    from methods.lrr.stages import INIT_STREAM

    gen = torch.Generator().manual_seed(3 + INIT_STREAM)       # the inits' own stream (not the data's)
    a0 = torch.randn(12, generator=gen, dtype=torch.float64)
    w0 = torch.randn(12, 4, generator=gen, dtype=torch.float64) / 2.0
    ref = single_neuron_compare(a0, w0, ("imp", "lrr"), 300, 0.1, 200, 3)
    for m in ("imp", "lrr"):
        out = single_neuron_experiment(3, m, dim=4, num_inits=12, steps=300, lr=0.1, num_samples=200)
        assert out["success"] == pytest.approx(ref[m]["success"].double().mean().item())
        assert out["mask_correct"] == pytest.approx(ref[m]["mask_correct"].double().mean().item())
        assert out["final_loss"] == pytest.approx(ref[m]["loss"].median().item())


def test_single_neuron_inits_are_drawn_apart_from_the_data():
    """a₀ and w₀ come from their own stream: seeded like the data, they would be its first entries."""
    import torch

    from methods.lrr import stages
    from methods.lrr.theory import single_neuron_data

    seen = {}
    real = stages.single_neuron_compare

    def spy(a0, w0, *args):
        seen["a0"], seen["w0"] = a0, w0
        return real(a0, w0, *args)

    stages.single_neuron_compare, old = spy, stages.single_neuron_compare
    try:
        stages.single_neuron_experiment(3, "imp", dim=4, num_inits=8, steps=2, lr=0.1, num_samples=64)
    finally:
        stages.single_neuron_compare = old
    x, _ = single_neuron_data(64, 4, seed=3)
    assert not torch.isclose(seen["a0"], x.flatten()[:8]).any()
    assert not torch.isclose(seen["w0"].flatten() * 2, x.flatten()[8:40]).any()
