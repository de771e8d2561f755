"""Cost of LRR/IMP on LeNet-300-100: one SGD step with the masks held (keep_masked: gradient and
forward pre-hooks) vs a dense step, and a whole run (dense round + R pruning rounds, plus IMP's
rewinds) vs one dense training round, as ratios measured in the same process.

    python benchmarks/lrr_cost.py [--n 12000] [--rounds 10] [--repeats 21]
        -> table + benchmarks/results/lrr_cost.json
Random inputs stand in for Fashion-MNIST (the cost does not depend on the pixels).
"""
import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from methods.lrr import (LeNet300100, global_magnitude_masks, iterative_pruning, keep_masked,  # noqa: E402
                         prunable_weights, train_sgd)

BATCH = 128


def step_fn(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=12000)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--repeats", type=int, default=21)
    args = p.parse_args()
    torch.manual_seed(0)
    x, y = torch.randn(args.n, 784), torch.randint(0, 10, (args.n,))

    # one step, dense vs masked at the last round's sparsity (hooks active)
    dense, masked = LeNet300100(), LeNet300100()
    masked.load_state_dict(dense.state_dict())
    sparsity = 1 - 0.8 ** args.rounds
    masks = global_magnitude_masks(prunable_weights(masked), sparsity)
    xb, yb = x[:BATCH], y[:BATCH]
    with keep_masked(masked, masks):
        t = interleaved({"dense": step_fn(dense, xb, yb), "masked": step_fn(masked, xb, yb)}, args.repeats)

    # whole runs vs one dense round (1 epoch over n samples each)
    def train_fn(model, k):
        return train_sgd(model, x, y, epochs=1, seed=k)
    base = LeNet300100()
    c = time.perf_counter()
    rewind_step = min(20, args.n // BATCH - 1)           # the mini tier rewinds to step 20
    rewind = train_sgd(base, x, y, epochs=1, seed=0, snapshot_step=rewind_step)["snapshot"]
    one_round = time.perf_counter() - c
    runs = {}
    for method in ("lrr", "imp"):
        model = copy.deepcopy(base)
        c = time.perf_counter()
        iterative_pruning(model, train_fn, args.rounds, method=method, rewind_state=rewind)
        runs[method] = one_round + time.perf_counter() - c       # dense round 0 + R rounds

    rows = {"step": {"dense_s": t["dense"], "masked_s": t["masked"], "ratio": t["masked"] / t["dense"]},
            **{f"{m}_run": {"dense_s": one_round, "run_s": s, "ratio": s / one_round} for m, s in runs.items()}}
    lines = ["| what | dense (s) | LRR/IMP (s) | ratio |", "|---|---|---|---|",
             f"| one SGD step, {100 * sparsity:.0f}% sparse, masks held | {t['dense']:.4f} | {t['masked']:.4f} "
             f"| {rows['step']['ratio']:.2f} |"]
    lines += [f"| {m.upper()} run (1 + {args.rounds} rounds) vs one round | {one_round:.2f} | {s:.2f} "
              f"| {s / one_round:.1f} |" for m, s in runs.items()]
    lines += ["", f"LeNet-300-100, batch {BATCH}, {args.n} random samples per round (1 epoch), "
              f"{torch.get_num_threads()} CPU thread(s); step times are medians of {args.repeats} interleaved steps. "
              f"Masked weights are stored dense (zeros), so a round costs what a dense round costs."]
    table = "\n".join(lines)
    print(table)
    save("lrr_cost", {"rows": rows, "n": args.n, "rounds": args.rounds, "batch": BATCH, "sparsity": sparsity,
                      "repeats": args.repeats, "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
