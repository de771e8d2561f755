"""Intra-Fusion: the OT plan against scipy's LP solver, the merge rules against slow loops,
lossless fusion of duplicated neurons, BatchNorm folding, plain pruning as index selection,
the Torch-Pruning glue (group order, Flatten, residual groups, Taylor scores), bad input."""
import copy
import warnings

import pytest
import torch
from scipy.optimize import linprog
from torch import nn

from methods.intra_fusion import (CNN, MLP, fold_batchnorm, fuse_layer, group_importance, keep_indices, kept_count,
                                  masses, merge, neuron_cost, ordered_groups, output_layer, prune, transport_plan)
from methods.intra_fusion.stages import accuracy, calibration_batches, mini_cells, sweep


def gen(seed):
    return torch.Generator().manual_seed(seed)


def lp_plan(cost, mu, nu):
    """min ⟨P, C⟩ s.t. P1 = μ, Pᵀ1 = ν, P ≥ 0, written as a generic LP over vec(P)."""
    n, k = cost.shape
    rows = [[1.0 if j // k == a else 0.0 for j in range(n * k)] for a in range(n)]
    cols = [[1.0 if j % k == e else 0.0 for j in range(n * k)] for e in range(k)]
    res = linprog(cost.flatten().numpy(), A_eq=rows + cols, b_eq=list(mu) + list(nu), bounds=(0, None),
                  method="highs")
    return torch.tensor(res.x).view(n, k), res.fun


def test_transport_plan_solves_the_lp():
    cost = torch.rand(7, 3, generator=gen(0), dtype=torch.float64)
    mu = torch.rand(7, generator=gen(1), dtype=torch.float64) + 0.1
    nu = torch.rand(3, generator=gen(2), dtype=torch.float64) + 0.1
    plan = transport_plan(cost, mu, nu)   # masses are normalised inside
    mu, nu = mu / mu.sum(), nu / nu.sum()
    want, objective = lp_plan(cost, mu.tolist(), nu.tolist())
    assert plan.dtype == torch.float64 and plan.shape == (7, 3)
    assert float((plan * cost).sum()) == pytest.approx(objective, abs=1e-12)
    torch.testing.assert_close(plan, want, atol=1e-9, rtol=0)      # a generic cost has one optimum
    torch.testing.assert_close(plan.sum(1), mu)
    torch.testing.assert_close(plan.sum(0), nu)


def test_entropic_plan_is_close_to_the_exact_one():
    cost = torch.rand(12, 5, generator=gen(3), dtype=torch.float64)
    exact = transport_plan(cost, torch.ones(12), torch.ones(5))
    soft = transport_plan(cost, torch.ones(12), torch.ones(5), reg=0.01)   # × mean cost
    assert float((soft * cost).sum()) == pytest.approx(float((exact * cost).sum()), abs=0.01 * float(cost.mean()))
    torch.testing.assert_close(soft.sum(0), exact.sum(0), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="1e-05"), warnings.catch_warnings():
        warnings.simplefilter("ignore")                                     # POT's own underflow warnings
        transport_plan(cost, torch.ones(12), torch.ones(5), reg=1e-5)


def test_cost_and_masses_against_definitions():
    f = torch.randn(6, 4, generator=gen(4))
    keep = torch.tensor([1, 4])
    c = neuron_cost(f, keep, p=1.0)
    for a in range(6):
        for e, b in enumerate(keep.tolist()):
            want = sum(abs(float(f[a, j] / f[a].norm() - f[b, j] / f[b].norm())) for j in range(4))
            assert float(c[a, e]) == pytest.approx(want, rel=1e-6)
    s = torch.tensor([1.0, 3.0, 0.0, 4.0])
    torch.testing.assert_close(masses("importance", s), s.double() / 8)
    torch.testing.assert_close(masses("importance", s, torch.tensor([1, 3])), torch.tensor([3 / 7, 4 / 7]).double())
    torch.testing.assert_close(masses("uniform", s), torch.full((4,), 0.25, dtype=torch.float64))


def test_keep_rounds_and_breaks_ties_to_the_lower_index():
    assert [kept_count(10, s) for s in (0.0, 0.3, 0.5, 0.75, 0.95, 0.99)] == [10, 7, 5, 3, 1, 1]
    assert kept_count(5, 0.5) == 3                                   # 2.5 rounds up
    scores = torch.tensor([1.0, 2.0, 2.0, 0.5, 2.0])
    assert keep_indices(scores, 0.6).tolist() == [1, 2]              # three tied at 2.0: the lowest two


def slow_merge(plan, w_in, b_in, w_out, official=False):
    n, k = plan.shape
    mu, nu = plan.sum(1), plan.sum(0)
    new_in = torch.zeros(k, *w_in.shape[1:], dtype=torch.float64)
    new_b = torch.zeros(k, dtype=torch.float64)
    new_out = torch.zeros(w_out.shape[0], k, *w_out.shape[2:], dtype=torch.float64)
    for e in range(k):
        for a in range(n):
            scale = 1 / mu[a] if official else 1 / nu[e]
            new_in[e] += plan[a, e] * scale * w_in[a]
            new_b[e] += plan[a, e] * scale * b_in[a]
            if mu[a] > 0:
                new_out[:, e] += w_out[:, a] * plan[a, e] / mu[a]
    return new_in, new_b, new_out


@pytest.mark.parametrize("official", [False, True])
def test_merge_matches_slow_loop(official):
    n, k, m = 6, 4, 3
    plan = transport_plan(torch.rand(n, k, generator=gen(5)), torch.rand(n, generator=gen(6)) + 0.2,
                          torch.rand(k, generator=gen(7)) + 0.2)
    w_in, b_in = torch.randn(n, 2, 3, generator=gen(8)).double(), torch.randn(n, generator=gen(9)).double()
    w_out = torch.randn(m, n, 5, generator=gen(10)).double()
    got = merge(plan, w_in, b_in, w_out, normalization="official" if official else "mean")
    for g, w in zip(got, slow_merge(plan, w_in, b_in, w_out, official)):
        torch.testing.assert_close(g, w)


def test_selection_plan_equals_plain_pruning():
    n, keep = 5, torch.tensor([0, 2, 3])
    plan = torch.zeros(n, 3, dtype=torch.float64)
    plan[keep, torch.arange(3)] = 1 / 3                   # dropped neurons carry no mass
    w_in, b_in, w_out = torch.randn(n, 4).double(), torch.randn(n).double(), torch.randn(2, n).double()
    for normalization in ("mean", "official"):
        got = merge(plan, w_in, b_in, w_out, normalization)
        for g, want in zip(got, (w_in[keep], b_in[keep], w_out[:, keep])):
            torch.testing.assert_close(g, want)


def duplicated_pair(k=4, d=5, m=3, seed=11):
    """Linear(d, 2k) -> ReLU -> Linear(2k, m) whose hidden neuron k + a copies neuron a exactly."""
    g = gen(seed)
    w_in, b_in, w_out = torch.randn(k, d, generator=g), torch.randn(k, generator=g), torch.randn(m, k, generator=g)
    return torch.cat([w_in, w_in]), torch.cat([b_in, b_in]), torch.cat([w_out, w_out], 1)


def forward(w_in, b_in, w_out, x):
    return torch.relu(x @ w_in.T + b_in) @ w_out.T


def test_duplicated_neurons_fuse_losslessly_plain_pruning_does_not():
    w_in, b_in, w_out = duplicated_pair()
    x = torch.randn(50, 5, generator=gen(12))
    dense = forward(w_in, b_in, w_out, x)
    importance = torch.tensor([2.0] * 4 + [1.0] * 4)      # keep the first copy of each pair
    f_in, f_b, f_out, keep = fuse_layer(w_in, b_in, w_out, importance, 0.5)
    assert keep.tolist() == [0, 1, 2, 3]
    torch.testing.assert_close(forward(f_in, f_b, f_out, x), dense, atol=1e-5, rtol=1e-5)
    plain = forward(w_in[keep], b_in[keep], w_out[:, keep], x)
    assert (plain - dense).abs().max() > 0.1
    o_in, o_b, o_out, _ = fuse_layer(w_in, b_in, w_out, importance, 0.5, normalization="official")
    torch.testing.assert_close(o_in, 2 * f_in)            # the official rows are n/k = 2 times larger
    assert (forward(o_in, o_b, o_out, x) - dense).abs().max() > 0.1


def with_random_bn_stats(model, seed=0):
    g = gen(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g))
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.randn(m.num_features, generator=g))
            m.bias.data.copy_(torch.randn(m.num_features, generator=g))
    return model.eval()


@pytest.mark.parametrize("make", [lambda: MLP(784, (12, 10), 3), lambda: CNN(1, 4, 3)])
def test_fold_batchnorm_keeps_outputs_and_leaves_identity(make):
    torch.manual_seed(0)
    model = with_random_bn_stats(make())
    x = torch.randn(6, 1, 28, 28, generator=gen(13))
    before = copy.deepcopy(model)
    fold_batchnorm(model)
    torch.testing.assert_close(model(x), before(x), atol=1e-5, rtol=1e-5)
    pairs = [(a, b) for a, b in zip(before.modules(), model.modules())]
    for i, (old, new) in enumerate(pairs):
        if isinstance(old, nn.modules.batchnorm._BatchNorm):
            layer_old, layer_new = pairs[i - 1]               # the conv/linear just before it
            sigma = (old.running_var + old.eps).sqrt()
            shape = (-1,) + (1,) * (layer_old.weight.dim() - 1)
            torch.testing.assert_close(layer_new.weight, layer_old.weight * (old.weight / sigma).view(shape))
            b = layer_old.bias if layer_old.bias is not None else 0
            torch.testing.assert_close(layer_new.bias, (b - old.running_mean) * old.weight / sigma + old.bias)
            assert (new.weight == 1).all() and (new.bias == 0).all() and (new.running_mean == 0).all()
            torch.testing.assert_close(new.running_var + new.eps, torch.ones_like(new.running_var))


def test_groups_come_output_side_first_and_skip_the_classifier():
    import torch_pruning as tp

    for model, widths in ((MLP(784, (9, 8, 7), 3), [7, 8, 9]), (CNN(1, 4, 3), [16, 16, 8, 4])):
        model.eval()
        graph = tp.DependencyGraph().build_dependency(model, example_inputs=torch.randn(1, 1, 28, 28))
        roots = ordered_groups(graph, model, [output_layer(model)])
        assert [graph.get_out_channels(r) for r in roots] == widths


def test_plain_pruning_selects_the_l1_top_channels():
    torch.manual_seed(1)
    model = with_random_bn_stats(MLP(784, (12, 10), 3), seed=2)
    folded = fold_batchnorm(copy.deepcopy(model))
    fc1, fc2 = folded[1], folded[4]                        # group 1 is fc1's 12 outputs
    w1, w2 = fc1.weight.detach(), fc2.weight.detach()
    score = [(float(w1[a].abs().sum()) + float(w2[:, a].abs().sum())) / 2 for a in range(12)]
    keep = sorted(sorted(range(12), key=lambda a: -score[a])[:kept_count(12, 0.4)])
    prune(model, torch.randn(1, 1, 28, 28), 0.4, importance="l1", fuse=False, groups=[1])
    torch.testing.assert_close(model[1].weight, fc1.weight[keep])
    torch.testing.assert_close(model[1].bias, fc1.bias[keep])
    torch.testing.assert_close(model[4].weight, fc2.weight[:, keep])
    assert model[2].num_features == len(keep)


def test_fused_pruning_through_a_flatten_equals_fuse_layer():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(2, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 4 * 4, 3)).eval()
    conv_w, conv_b, lin_w = model[0].weight.detach().clone(), model[0].bias.detach().clone(), model[3].weight.detach()
    w_out = lin_w.reshape(3, 6, 16)                        # (m, n, h·w)
    importance = (conv_w.abs().flatten(1).sum(1) + w_out.abs().sum((0, 2))) / 2
    want_w, want_b, want_out, keep = fuse_layer(conv_w, conv_b, w_out, importance, 0.5)
    prune(model, torch.randn(1, 2, 6, 6), 0.5, importance="l1", fuse=True, groups=[0])
    torch.testing.assert_close(model[0].weight, want_w)
    torch.testing.assert_close(model[0].bias, want_b)
    torch.testing.assert_close(model[3].weight, want_out.reshape(3, -1))


class Residual(nn.Module):
    """conv_a feeds a residual sum with conv_c, so both belong to one group."""

    def __init__(self):
        super().__init__()
        self.conv_a, self.bn_a = nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.conv_b, self.bn_b = nn.Conv2d(6, 5, 3, padding=1), nn.BatchNorm2d(5)
        self.conv_c, self.bn_c = nn.Conv2d(5, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        h = torch.relu(self.bn_a(self.conv_a(x)))
        h = torch.relu(h + self.bn_c(self.conv_c(torch.relu(self.bn_b(self.conv_b(h))))))
        return self.head(h.mean((2, 3)))


def test_sparsity_zero_fusion_is_lossless_on_a_residual_network():
    torch.manual_seed(3)
    model = with_random_bn_stats(Residual(), seed=4)
    x = torch.randn(4, 1, 8, 8, generator=gen(14))
    dense = model(x)
    pruned = prune(copy.deepcopy(model), x[:1], 0.0, fuse=True)           # k = n: the plan is diag(1/n)
    torch.testing.assert_close(pruned(x), dense, atol=1e-5, rtol=1e-5)
    half = prune(copy.deepcopy(model), x[:1], 0.5, fuse=True, groups=[0])  # the residual group
    assert half.conv_a.out_channels == half.conv_c.out_channels == half.head.in_features == 3
    assert half.conv_b.out_channels == 5 and torch.isfinite(half(x)).all()


def test_taylor_scores_against_autograd():
    torch.manual_seed(4)
    model = with_random_bn_stats(MLP(784, (8, 6), 3), seed=5)
    fold_batchnorm(model)
    x, y = torch.randn(10, 1, 28, 28, generator=gen(15)), torch.randint(0, 3, (10,), generator=gen(16))
    loss = nn.functional.cross_entropy(model(x[:5]), y[:5]) + nn.functional.cross_entropy(model(x[5:]), y[5:])
    g1, g2 = torch.autograd.grad(loss, [model[1].weight, model[4].weight])
    w1, w2 = model[1].weight.detach(), model[4].weight.detach()
    want = [(float((w1[a] * g1[a]).abs().sum()) + float((w2[:, a] * g2[:, a]).abs().sum())) / 2 for a in range(8)]
    import torch_pruning as tp

    graph = tp.DependencyGraph().build_dependency(model, example_inputs=x[:1])
    group = graph.get_pruning_group(model[1], tp.prune_linear_out_channels, list(range(8)))
    got = group_importance(group, "taylor", model, [(x[:5], y[:5]), (x[5:], y[5:])])
    torch.testing.assert_close(got / got.mean(), torch.tensor(want) / (sum(want) / 8), rtol=1e-4, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())


def test_sweep_runs_every_mini_cell():
    torch.manual_seed(5)
    model = MLP(784, (10, 8), 3).eval()
    x, y = torch.randn(40, 1, 28, 28, generator=gen(17)), torch.randint(0, 3, (40,), generator=gen(18))
    cells = mini_cells()
    out = sweep(model, x, y, x[:1], [0, 1], cells, calibration=calibration_batches(x, y, 2, 8))
    assert set(out) == set(cells) and all(len(v) == 2 and 0 <= min(v) <= max(v) <= 100 for v in out.values())
    assert accuracy(model, x, y) == pytest.approx(100 * float((model(x).argmax(1) == y).float().mean()))


@pytest.mark.parametrize("kwargs, word", [
    (dict(sparsity=1.0), "1.0"), (dict(sparsity=-0.1), "-0.1"), (dict(importance="l3"), "l3"),
    (dict(source_mass="softmax"), "softmax"), (dict(target_mass="x"), "'x'"),
    (dict(normalization="max"), "max"), (dict(importance="taylor"), "calibration"), (dict(groups=[7]), "7"),
])
def test_bad_input_is_a_value_error_naming_it(kwargs, word):
    model = MLP(784, (6, 5), 3).eval()
    args = dict(sparsity=0.5) | kwargs
    with pytest.raises(ValueError, match=word.replace(".", r"\.")):
        prune(model, torch.randn(1, 1, 28, 28), **args)


def test_bad_plan_shapes_are_value_errors():
    with pytest.raises(ValueError, match=r"\(4, 3\)"):
        transport_plan(torch.rand(4, 2), torch.ones(4), torch.ones(3))
    with pytest.raises(ValueError, match="5"):
        merge(torch.rand(4, 2).double(), torch.randn(5, 3), None, torch.randn(2, 5))
    with pytest.raises(ValueError, match="disagree"):
        fuse_layer(torch.randn(4, 3), None, torch.randn(2, 5), torch.ones(4), 0.5)
