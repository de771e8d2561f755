"""Cost of Intra-Fusion over plain pruning on the paper's networks (the official CIFAR VGG11-BN and
ResNet18): one group pruned alone (the paper's groups 1-3) and the whole network (every group, one
after another), and where the extra time goes (the OT plan vs the merge); then how the OT solver's
share grows with the group's width, exact EMD vs entropic Sinkhorn.

    python benchmarks/intra_fusion_prune_time.py [--quick]
        -> table + benchmarks/results/intra_fusion_prune_time.{json,png}

Networks: randomly initialised (seed 0; pruning time does not depend on the weights' values
beyond the OT solver's pivots), eval mode, one CPU thread, l1 importance at 50% sparsity.
"plain" and "fused" time the whole `prune(copy.deepcopy(model), ...)` call: the copy, BatchNorm
folding, Torch-Pruning's dependency graph, scoring, the removal, and for "fused" the OT fusion
(`prune.fuse_group`), which is also timed alone on the same group: "ot" is cost + `ot.emd`
(`transport.neuron_cost`, `transport.transport_plan`), the rest of `fuse_group` is gathering the
group's weights and merging them (float64 einsums). Medians of interleaved repeats.
"""
import copy
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import OUT, interleaved, save  # noqa: E402
from methods.intra_fusion import (ResNet18, VGG, fold_batchnorm, keep_indices, masses, neuron_cost,  # noqa: E402
                                  ordered_groups, output_layer, prune, transport_plan)
from methods.intra_fusion.prune import _gathered, _pieces, fuse_group, group_importance  # noqa: E402

SPARSITY, REG = 0.5, 0.01
GROUPS = (1, 2, 3)
SIZES = (64, 128, 256, 512, 1024, 2048)
SINKHORN_UP_TO = 256        # Sinkhorn at this reg runs to its iteration cap (10^5) on the larger groups: minutes


def networks():
    torch.manual_seed(0)
    return {"vgg11_bn": VGG().eval(), "resnet18": ResNet18().eval()}


def group_parts(model: nn.Module, example: torch.Tensor, g: int):
    """Group g of the folded model as `prune` sees it: (group, scores, keep, cost (n, k))."""
    import torch_pruning as tp

    folded = fold_batchnorm(copy.deepcopy(model))
    graph = tp.DependencyGraph().build_dependency(folded, example_inputs=example)
    root = ordered_groups(graph, folded, [output_layer(folded)])[g]
    n = graph.get_out_channels(root)
    group = graph.get_pruning_group(root, graph.get_pruner_of_module(root).prune_out_channels, list(range(n)))
    scores = group_importance(group, "l1", folded)
    keep = keep_indices(scores, SPARSITY)
    feats = [_gathered(*piece[:4]).reshape(n, -1) for piece in _pieces(group, n) if piece[1] == "weight"]
    return group, scores, keep, torch.cat(feats, 1), n


def network_rows(repeats: int) -> list[dict]:
    rows, example = [], torch.randn(1, 3, 32, 32)
    for name, model in networks().items():
        for g in (*GROUPS, None):
            groups = None if g is None else [g]
            fns = {"plain": lambda: prune(copy.deepcopy(model), example, SPARSITY, fuse=False, groups=groups),
                   "fused": lambda: prune(copy.deepcopy(model), example, SPARSITY, fuse=True, groups=groups)}
            row = {"network": name, "group": "all" if g is None else g}
            if g is not None:
                group, scores, keep, feats, n = group_parts(model, example, g)
                mu, nu = masses("uniform", scores), masses("uniform", scores, keep)
                fns["fuse_group"] = lambda: fuse_group(group, scores, keep)
                fns["ot"] = lambda: transport_plan(neuron_cost(feats, keep), mu, nu)
                row |= {"channels": n, "kept": len(keep), "features": feats.shape[1]}
            t = interleaved(fns, repeats)
            row |= {f"{k}_s": v for k, v in t.items()} | {"fused_over_plain": t["fused"] / t["plain"]}
            if g is not None:
                row |= {"ot_share_of_extra": t["ot"] / max(t["fused"] - t["plain"], 1e-9),
                        "merge_s": t["fuse_group"] - t["ot"]}
            rows.append(row)
            print(row, flush=True)
    return rows


def scaling_row(n: int, repeats: int) -> dict:
    """A random MLP 256 -> n (BatchNorm1d, ReLU) -> 256 -> 10, its n-wide group (group 1) pruned."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(256, n), nn.BatchNorm1d(n), nn.ReLU(), nn.Linear(n, 256), nn.ReLU(),
                         nn.Linear(256, 10)).eval()
    example = torch.randn(1, 256)
    w_in, w_out = base[0].weight.detach(), base[3].weight.detach()
    keep = keep_indices((w_in.abs().sum(1) + w_out.abs().sum(0)) / 2, SPARSITY)
    cost = neuron_cost(torch.cat([w_in, w_out.T], 1), keep)                       # (n, k)
    ones_n, ones_k = torch.ones(n), torch.ones(len(keep))
    fns = {"plain": lambda: prune(copy.deepcopy(base), example, SPARSITY, fuse=False, groups=[1]),
           "fused": lambda: prune(copy.deepcopy(base), example, SPARSITY, fuse=True, groups=[1]),
           "emd": lambda: transport_plan(cost, ones_n, ones_k)}
    if n <= SINKHORN_UP_TO:
        fns["sinkhorn"] = lambda: transport_plan(cost, ones_n, ones_k, reg=REG)
    t = interleaved(fns, repeats)
    return {"n": n, **{f"{k}_s": v for k, v in t.items()}, "fused_over_plain": t["fused"] / t["plain"],
            "emd_share_of_fused": t["emd"] / t["fused"],
            "sinkhorn_over_emd": t["sinkhorn"] / t["emd"] if "sinkhorn" in t else None}


def plot(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for key, label in (("plain_s", "plain pruning"), ("fused_s", "Intra-Fusion"), ("emd_s", "ot.emd alone"),
                       ("sinkhorn_s", "ot.sinkhorn alone")):
        pts = [(r["n"], r[key]) for r in rows if key in r]
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    ax.set_xlabel("channels n in the group (pruned to 50%)")
    ax.set_ylabel("seconds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "intra_fusion_prune_time.png", dpi=120)


def table(net_rows, scale_rows) -> str:
    lines = ["| network | group | channels n → k | plain (s) | fused (s) | fused / plain | fusion step (s) "
             "| of it OT: cost + emd (s) | merge (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in net_rows:
        if r["group"] == "all":
            lines.append(f"| {r['network']} | all | | {r['plain_s']:.2f} | {r['fused_s']:.2f} "
                         f"| {r['fused_over_plain']:.2f} | | | |")
        else:
            lines.append(f"| {r['network']} | {r['group']} | {r['channels']} → {r['kept']} | {r['plain_s']:.2f} "
                         f"| {r['fused_s']:.2f} | {r['fused_over_plain']:.2f} | {r['fuse_group_s']:.3f} "
                         f"| {r['ot_s']:.3f} | {r['merge_s']:.3f} |")
    lines += ["", "| MLP group width n | plain (s) | fused (s) | fused / plain | ot.emd share of fused "
              "| sinkhorn / emd time |", "|---|---|---|---|---|---|"]
    for r in scale_rows:
        lines.append(f"| {r['n']} | {r['plain_s']:.3f} | {r['fused_s']:.3f} | {r['fused_over_plain']:.2f} "
                     f"| {100 * r['emd_share_of_fused']:.0f}% | "
                     + ("–" if r["sinkhorn_over_emd"] is None else f"{r['sinkhorn_over_emd']:.2f}") + " |")
    lines += ["", f"l1 importance, {int(100 * SPARSITY)}% sparsity, randomly initialised official CIFAR networks, "
              "one CPU thread; plain and fused time the whole `prune` call on a deep copy (graph building "
              "included); the fusion step is `fuse_group` alone; Sinkhorn at reg "
              f"{REG} × mean cost.", "", "![prune time](../../benchmarks/results/intra_fusion_prune_time.png)"]
    return "\n".join(lines)


def main():
    quick = "--quick" in sys.argv
    torch.set_num_threads(1)
    t0 = time.time()
    net_rows = network_rows(1 if quick else 2)
    scale_rows = []
    for n in (SIZES[:3] if quick else SIZES):
        scale_rows.append(scaling_row(n, 1 if quick else 2))
        print(scale_rows[-1], flush=True)
    text = table(net_rows, scale_rows)
    print(text)
    plot(scale_rows)
    save("intra_fusion_prune_time", {"sparsity": SPARSITY, "reg": REG, "networks": net_rows, "scaling": scale_rows,
                                     "quick": quick, "threads": 1, "seconds": time.time() - t0,
                                     "load_average_at_end": os.getloadavg()},
         None if quick else text)


if __name__ == "__main__":
    main()
