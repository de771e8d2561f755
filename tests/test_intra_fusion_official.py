"""Intra-Fusion against the official code (github.com/alexandertheus/Intra-Fusion at 82a2871, MIT):
the group order that picks the paper's groups on the official CIFAR networks (VGG11-BN group 1 =
`features.22`, the seventh conv; ResNet18 group 3 = layer3's residual stream), and the fusion of
`torch_pruning/optimal_transport.py` (`OptimalTransport.__call__`) applied as
`torch_pruning/pruner/function.py` (`_prune_parameter_and_grad`) applies it, written out here
step by step, against `prune(..., normalization="official")`; our default ("mean") differs from
it only by the row scale k/n of the incoming weights (uniform masses)."""
import copy

import numpy as np
import ot
import pytest
import torch
import torch_pruning as tp
from torch import nn

from methods.intra_fusion import VGG, ResNet18, fold_batchnorm, keep_indices, ordered_groups, output_layer, prune
from methods.intra_fusion.prune import fuse_group
from methods.intra_fusion.stages import mini_cells, subrow_name
from tests.test_intra_fusion import Residual


def roots_and_groups(model, example):
    model = model.eval()
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=example)
    roots = ordered_groups(graph, model, [output_layer(model)])
    names = {m: n for n, m in model.named_modules()}
    groups = []
    for r in roots:
        group = graph.get_pruning_group(r, graph.get_pruner_of_module(r).prune_out_channels,
                                        list(range(graph.get_out_channels(r))))
        producers = {names[d.target.module] for d, _ in group if graph.is_out_channel_pruning_fn(d.handler)
                     and isinstance(d.target.module, nn.Conv2d)}
        readers = {names[d.target.module] for d, _ in group if d.handler in (tp.prune_conv_in_channels,
                                                                             tp.prune_linear_in_channels)}
        groups.append((names[r], producers, readers, graph.get_out_channels(r)))
    return groups


def test_vgg11_group_1_is_features_22_the_seventh_conv():
    model = VGG()
    convs = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 8 and convs[6] == "features.22"
    groups = roots_and_groups(model, torch.randn(1, 3, 32, 32))
    assert [g[0] for g in groups] == ["features.25", "features.22", "features.18", "features.15", "features.11",
                                      "features.8", "features.4", "features.0"]
    name, producers, readers, n = groups[1]
    assert producers == {"features.22"} and readers == {"features.25"} and n == 512
    assert groups[2][1:3] == ({"features.18"}, {"features.22"}) and groups[3][1:3] == ({"features.15"}, {"features.18"})
    pruned = prune(copy.deepcopy(model), torch.randn(1, 3, 32, 32), 0.5, fuse=False, groups=[1])
    widths = {n: (m.in_channels, m.out_channels) for n, m in pruned.named_modules() if isinstance(m, nn.Conv2d)}
    assert widths["features.22"] == (512, 256) and widths["features.25"] == (256, 512)
    assert widths["features.18"] == (512, 512) and pruned.classifier.in_features == 512


def test_resnet18_group_3_is_the_layer3_residual_stream():
    groups = roots_and_groups(ResNet18(), torch.randn(1, 3, 32, 32))
    stream4 = {"layer4.0.conv2", "layer4.0.shortcut.0", "layer4.1.conv2"}
    assert groups[0][1] == stream4 and groups[0][3] == 512 and groups[0][2] == {"layer4.1.conv1", "linear"}
    assert groups[1][1] == {"layer4.1.conv1"} and groups[2][1] == {"layer4.0.conv1"}
    name, producers, readers, n = groups[3]
    assert producers == {"layer3.0.conv2", "layer3.0.shortcut.0", "layer3.1.conv2"} and n == 256
    assert readers == {"layer3.1.conv1", "layer4.0.conv1", "layer4.0.shortcut.0"}
    assert groups[4][1] == {"layer3.1.conv1"} and groups[5][1] == {"layer3.0.conv1"}


# ---- the official fusion, written out --------------------------------------------------------------

def official_fusion(producers, consumers, importance, pruning_idxs, p=1, source="uniform", target="uniform"):
    """OptimalTransport.__call__ (target 'most_important', CPU) and _prune_parameter_and_grad.

    producers: [(weight (n, ...), bias (n,) or None)] of the layers whose out channels are the
    group; consumers: [weight (m, n, ...)] of the layers that read them. Returns the new
    producers [(weight (k, ...), bias)] and consumers [weight (m, k, ...)], float32 as there."""
    n = producers[0][0].shape[0]
    idxs = sorted(range(n))
    w_all = [w[idxs].flatten(1) for w, _ in producers]                     # out channels: rows
    w_all += [w.transpose(0, 1)[idxs].flatten(1) for w in consumers]       # in channels: columns
    keep_idxs = sorted(set(range(n)) - {int(i) for i in pruning_idxs})
    w_all = torch.cat(w_all, dim=1).float()
    w_keep = w_all[keep_idxs]
    cost = torch.cdist(w_all / torch.norm(w_all, dim=-1, keepdim=True),
                       w_keep / torch.norm(w_keep, dim=-1, keepdim=True), p=p)

    def probability(kind, cardinality, imp):
        if kind == "uniform":
            return np.ones(cardinality).astype(dtype="float64") / cardinality
        imp = imp.numpy().astype(dtype="float64")
        return imp / np.sum(imp)

    source_prob = probability(source, cost.shape[0], importance)
    target_prob = probability(target, cost.shape[1], importance[keep_idxs])
    ot_map = ot.emd(source_prob, target_prob, cost.detach().cpu().numpy()).transpose()   # (k, n)
    ot_map = torch.from_numpy(ot_map).float()
    ot_map = ot_map / ot_map.sum(dim=0)                                     # each source column / μ_a
    new_producers = []
    for w, b in producers:                                                  # pruning_dim 0: "ea,a...->e..."
        new_w = torch.einsum("ea,a...->e...", ot_map, w.float())
        new_producers.append((new_w, None if b is None else torch.einsum("ea,a->e", ot_map, b.float())))
    new_consumers = [torch.einsum("eb,ab...->ae...", ot_map, w.float()) for w in consumers]   # pruning_dim 1
    return new_producers, new_consumers


class Chain(nn.Module):
    """conv1 (group 1) -> conv2 (group 0) -> pooled linear classifier; biases, no BatchNorm."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(2, 10, 3, padding=1), nn.Conv2d(10, 7, 3, padding=1)
        self.head = nn.Linear(7, 3)

    def forward(self, x):
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(h.mean((2, 3)))


def l1_group_score(producers, consumers):
    """The official group magnitude importance ('mean' over the group's layers of Σ|w| per channel)."""
    per = [w.abs().flatten(1).sum(1) for w, _ in producers] + [w.abs().transpose(0, 1).flatten(1).sum(1)
                                                                for w in consumers]
    return torch.stack(per).mean(0)


@pytest.mark.parametrize("masses", ["uniform", "importance"])
@pytest.mark.parametrize("sparsity", [0.3, 0.6])
def test_prune_official_equals_the_official_fusion_written_out(masses, sparsity):
    torch.manual_seed(7)
    model = Chain().eval()
    x = torch.randn(1, 2, 6, 6)
    producers = [(model.conv1.weight.detach().clone(), model.conv1.bias.detach().clone())]
    consumers = [model.conv2.weight.detach().clone()]
    score = l1_group_score(producers, consumers)
    keep = keep_indices(score, sparsity)
    pruning_idxs = sorted(set(range(10)) - set(keep.tolist()))
    (want_w, want_b), = official_fusion(producers, consumers, score, pruning_idxs, 1, masses, masses)[0]
    want_out, = official_fusion(producers, consumers, score, pruning_idxs, 1, masses, masses)[1]
    got = prune(copy.deepcopy(model), x, sparsity, importance="l1", fuse=True, groups=[1], normalization="official",
                source_mass=masses, target_mass=masses)
    torch.testing.assert_close(got.conv1.weight, want_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.conv1.bias, want_b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.conv2.weight, want_out, rtol=1e-5, atol=1e-6)
    mean = prune(copy.deepcopy(model), x, sparsity, importance="l1", fuse=True, groups=[1], source_mass=masses,
                 target_mass=masses)
    torch.testing.assert_close(mean.conv2.weight, want_out, rtol=1e-5, atol=1e-6)   # outgoing: the same rule
    if masses == "uniform":                 # incoming: (P/ν_e) vs (P/μ_a) = k/n times the official rows
        ratio = len(keep) / 10
        torch.testing.assert_close(mean.conv1.weight, ratio * want_w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(mean.conv1.bias, ratio * want_b, rtol=1e-5, atol=1e-6)
    else:
        assert not torch.allclose(mean.conv1.weight, want_w)


def test_residual_group_official_fusion_written_out():
    """Several producers and consumers in one group: the official code concatenates all their rows
    and columns into one feature per channel and applies the one plan to every layer."""
    torch.manual_seed(8)
    model = Residual().eval()
    g = torch.Generator().manual_seed(9)
    for bn in (model.bn_a, model.bn_b, model.bn_c):
        bn.running_mean.copy_(torch.randn(bn.num_features, generator=g))
        bn.running_var.copy_(torch.rand(bn.num_features, generator=g) + 0.5)
        bn.weight.data.copy_(torch.rand(bn.num_features, generator=g) + 0.5)
        bn.bias.data.copy_(torch.randn(bn.num_features, generator=g))
    folded = fold_batchnorm(copy.deepcopy(model))              # both the official code and ours fold first
    producers = [(folded.conv_a.weight.detach().clone(), folded.conv_a.bias.detach().clone()),
                 (folded.conv_c.weight.detach().clone(), folded.conv_c.bias.detach().clone())]
    consumers = [folded.conv_b.weight.detach().clone(), folded.head.weight.detach().clone()]
    score = l1_group_score(producers, consumers)
    keep = keep_indices(score, 0.5)
    new_p, new_c = official_fusion(producers, consumers, score, sorted(set(range(6)) - set(keep.tolist())))
    got = prune(copy.deepcopy(model), torch.randn(1, 1, 8, 8), 0.5, fuse=True, groups=[0], normalization="official")
    for layer, (w, b) in zip((got.conv_a, got.conv_c), new_p):
        torch.testing.assert_close(layer.weight, w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(layer.bias, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.conv_b.weight, new_c[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.head.weight, new_c[1], rtol=1e-5, atol=1e-6)


# ---- the random-neuron merge control and the per-group sub-rows ------------------------------------

def test_random_merge_keeps_each_kept_channel_and_merges_the_rest_at_random():
    torch.manual_seed(10)
    model = Chain().eval()
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=torch.randn(1, 2, 6, 6))
    group = graph.get_pruning_group(model.conv1, tp.prune_conv_out_channels, list(range(10)))
    keep = torch.tensor([0, 3, 4, 8, 9])
    plans = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        plans.append(fuse_group(group, torch.ones(10), keep, cost="random"))
    for plan in plans:
        torch.testing.assert_close(plan.sum(1), torch.full((10,), 0.1, dtype=torch.float64))
        torch.testing.assert_close(plan.sum(0), torch.full((5,), 0.2, dtype=torch.float64))
        torch.testing.assert_close(plan[keep, torch.arange(5)], torch.full((5,), 0.1, dtype=torch.float64))
    assert not torch.equal(plans[0], plans[1])             # where the dropped channels go is random
    with pytest.raises(ValueError, match="'nearest'"):
        prune(Chain().eval(), torch.randn(1, 2, 6, 6), 0.5, cost="nearest")


def test_subrow_names_cover_every_cell():
    cells = mini_cells((30, 70), (70,), 70, (70,))
    names = {subrow_name(c, 2) for c in cells}
    assert names == {"prune_g2/l1_30", "fuse_g2/l1_30", "prune_g2/l1_70", "fuse_g2/l1_70", "prune_g2/taylor_70",
                     "fuse_g2/taylor_70", "official_g2/l1_70", "randmerge_g2/l1_70"}
    assert cells["fuse_l1_70_random"]["cost"] == "random"
    with pytest.raises(ValueError, match="not a cell"):
        subrow_name("fuse_l1_70_other", 1)


def test_mini_run_reports_per_group_subrows_and_stops_on_validation(compose_cfg, tmp_path, monkeypatch):
    """The mini table's run path: validation split from the training images, best weights kept
    (early stop), each of the chosen groups' cells as `<variant>_g<g>/<cell>` sub-rows, no averages."""
    from common import data
    from common.runner import run_method

    g = torch.Generator().manual_seed(0)
    fake = {"train": (torch.randint(0, 256, (96, 1, 28, 28), dtype=torch.uint8, generator=g),
                      torch.randint(0, 10, (96,), generator=g)),
            "test": (torch.randint(0, 256, (32, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.randint(0, 10, (32,), generator=g))}
    monkeypatch.setattr(data, "image_splits", lambda ds: fake)
    base = ["experiment=intra_fusion_mini", f"run_dir={tmp_path}", "logger=none", "method.model.hidden=[12,10,8]",
            "method.groups=[1,2]", "method.dense_val.size=32", "method.dense_val.patience=2",
            "trainer.eval_every=2", "trainer.max_steps=40", "trainer.batch_size=16", "trainer.log_every=1"]
    out = run_method(compose_cfg(base))
    want = {f"{v}_g{gr}/{c}" for gr in (1, 2) for v, c in [("prune", "l1_30"), ("fuse", "l1_30"), ("prune", "l1_50"),
                                                            ("fuse", "l1_50"), ("prune", "l1_70"), ("fuse", "l1_70"),
                                                            ("prune", "taylor_70"), ("fuse", "taylor_70"),
                                                            ("official", "l1_70"), ("randmerge", "l1_30"),
                                                            ("randmerge", "l1_50"), ("randmerge", "l1_70")]}
    assert {k for k in out if "/" in k} == want and "fuse_l1_70" not in out
    assert 0 < out["dense_steps"] <= 40 and out["dense_steps"] % 2 == 0 and 0 <= out["dense_val_acc"] <= 100
    with pytest.raises(ValueError, match="dense_val.size=96"):
        run_method(compose_cfg(base[:-5] + ["method.dense_val.size=96", "trainer.eval_every=2"]))
    with pytest.raises(ValueError, match="eval_every"):
        run_method(compose_cfg(base[:7] + ["trainer.eval_every=0", "trainer.max_steps=4"]))
