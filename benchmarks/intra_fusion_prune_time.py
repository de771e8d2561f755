"""Cost of Intra-Fusion over plain pruning of one group as the group grows, the share of that
cost spent in the exact OT solver (`ot.emd`), and exact EMD vs entropic Sinkhorn.

    python benchmarks/intra_fusion_prune_time.py [--quick]
        -> table + benchmarks/results/intra_fusion_prune_time.{json,png}

Timing: a random MLP 256 -> n (BatchNorm1d, ReLU) -> 256 -> 10, the hidden group of n
channels pruned to 50%, plain vs fused (the same Torch-Pruning steps, plus the OT plan and the
merge); `ot.emd` and `ot.sinkhorn` timed on that group's own cost matrix.
Accuracy: an MLP (784-256-256-128-10) trained for one epoch on 10k Fashion-MNIST images, each
group pruned alone at 50% and 70% with the exact plan and with Sinkhorn (reg = 0.01 × mean cost).
"""
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import OUT, interleaved, save  # noqa: E402
from methods.intra_fusion import MLP, keep_indices, neuron_cost, prune, transport_plan  # noqa: E402
from methods.intra_fusion import stages  # noqa: E402

SIZES = (64, 128, 256, 512, 1024, 2048)
SPARSITY, REG = 0.5, 0.01


def timing_row(n: int, repeats: int) -> dict:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(256, n), nn.BatchNorm1d(n), nn.ReLU(), nn.Linear(n, 256), nn.ReLU(),
                         nn.Linear(256, 10)).eval()
    example = torch.randn(1, 256)
    w_in, w_out = base[0].weight.detach(), base[3].weight.detach()
    features = torch.cat([w_in, w_out.T], 1)                                   # (n, 512)
    keep = keep_indices((w_in.abs().sum(1) + w_out.abs().sum(0)) / 2, SPARSITY)
    cost = neuron_cost(features, keep)                                          # (n, k)
    ones_n, ones_k = torch.ones(n), torch.ones(len(keep))
    group = 1                                                                   # group 0 is the 256-wide layer
    fns = {
        "plain": lambda: prune(copy.deepcopy(base), example, SPARSITY, fuse=False, groups=[group]),
        "fused": lambda: prune(copy.deepcopy(base), example, SPARSITY, fuse=True, groups=[group]),
        "emd": lambda: transport_plan(cost, ones_n, ones_k),
        "sinkhorn": lambda: transport_plan(cost, ones_n, ones_k, reg=REG),
    }
    t = interleaved(fns, repeats)
    return {"n": n, **{f"{k}_s": v for k, v in t.items()}, "fused_over_plain": t["fused"] / t["plain"],
            "emd_share_of_fused": t["emd"] / t["fused"], "sinkhorn_over_emd": t["sinkhorn"] / t["emd"]}


def accuracy_rows(train_size: int) -> dict:
    from common.data import load

    x, y = load("fashion_mnist", "train", "data")
    xt, yt = load("fashion_mnist", "test", "data")
    x, y, xt, yt = stages.to_float(x[:train_size]), y[:train_size], stages.to_float(xt[:5000]), yt[:5000]
    torch.manual_seed(0)
    model = stages.fit(MLP(), x, y, epochs=1)
    out = {"dense": stages.accuracy(model, xt, yt)}
    for s in (0.5, 0.7):
        for solver, reg in (("emd", None), ("sinkhorn", REG)):
            accs = [stages.accuracy(prune(copy.deepcopy(model), x[:1], s, groups=[g], reg=reg), xt, yt)
                    for g in range(3)]
            out[f"{solver}_{int(100 * s)}"] = sum(accs) / len(accs)
    return out


def plot(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    sizes = [r["n"] for r in rows]
    for key, label in (("plain_s", "plain pruning"), ("fused_s", "Intra-Fusion"), ("emd_s", "ot.emd alone"),
                       ("sinkhorn_s", "ot.sinkhorn alone")):
        ax.loglog(sizes, [r[key] for r in rows], "o-", label=label)
    ax.set_xlabel("channels n in the group (pruned to 50%)")
    ax.set_ylabel("seconds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "intra_fusion_prune_time.png", dpi=120)


def main():
    quick = "--quick" in sys.argv
    torch.set_num_threads(1)
    t0 = time.time()
    rows = [timing_row(n, 1 if quick else 3) for n in (SIZES[:3] if quick else SIZES)]
    acc = accuracy_rows(2000 if quick else 10000)
    lines = ["| n | plain (s) | fused (s) | fused / plain | ot.emd share | sinkhorn / emd time |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['plain_s']:.3f} | {r['fused_s']:.3f} | {r['fused_over_plain']:.2f} "
                     f"| {100 * r['emd_share_of_fused']:.0f}% | {r['sinkhorn_over_emd']:.2f} |")
    lines += ["", "| accuracy (mean over the 3 MLP groups) | 50% | 70% |", "|---|---|---|",
              f"| exact ot.emd | {acc['emd_50']:.2f} | {acc['emd_70']:.2f} |",
              f"| ot.sinkhorn (reg {REG} × mean cost) | {acc['sinkhorn_50']:.2f} | {acc['sinkhorn_70']:.2f} |",
              "", f"Dense MLP: {acc['dense']:.2f}%. One CPU thread.",
              "", "![prune time](../../benchmarks/results/intra_fusion_prune_time.png)"]
    table = "\n".join(lines)
    print(table)
    plot(rows)
    save("intra_fusion_prune_time", {"sparsity": SPARSITY, "reg": REG, "timing": rows, "accuracy": acc,
                                     "quick": quick, "seconds": time.time() - t0}, None if quick else table)


if __name__ == "__main__":
    main()
