"""The floor's evaluation (common/distill evaluate_synthetic): K = 5 ConvNet (16, 16) trained at once
(stack_module_state + vmap) against the loop over nets, on a digits IPC 10 set (100 real images,
standardised), batch 256, one CPU thread. Target (issue #43): >= 2x.

    python benchmarks/distill_eval.py [--epochs 20] [--repeats 3]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common_bench import interleaved, save  # noqa: E402
from common import data  # noqa: E402
from common.distill import ConvNet, class_balanced_indices, evaluate_synthetic  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)   # the recorded table ran 20
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y = data.load("digits", "train")
    xt, yt = data.load("digits", "test")
    x, xt = x.float() / 255, xt.float() / 255
    mu, sd = x.mean(), x.std()
    x, xt = (x - mu) / sd, (xt - mu) / sd
    idx = class_balanced_indices(y, 10, torch.Generator().manual_seed(0))
    make = lambda: ConvNet(1, 10, (16, 16), img_size=8)   # noqa: E731
    kw = dict(lr=0.01, num_nets=5, epochs=args.epochs, batch_size=256, seed=0)
    accs = {}

    def job(vec):
        return lambda: accs.__setitem__(vec, evaluate_synthetic(make, x[idx], y[idx], xt, yt, vectorized=vec, **kw)["accs"])

    t = interleaved({"loop": job(False), "vectorized": job(True)}, args.repeats)
    ratio = t["loop"] / t["vectorized"]
    same = max(abs(a - b) for a, b in zip(accs[False], accs[True]))
    table = "\n".join([
        "| K nets | epochs | loop (s) | vectorized (s) | loop / vectorized | max accuracy difference (points) |",
        "|---|---|---|---|---|---|",
        f"| 5 | {args.epochs} | {t['loop']:.2f} | {t['vectorized']:.2f} | {ratio:.2f}x | {same:.1e} |",
        "", f"ConvNet (16, 16), instance norm, digits IPC 10 (100 images, one batch an epoch), one CPU thread, "
        f"median of {args.repeats} interleaved runs. Target >= 2x."])
    print(table)
    save("distill_eval", {"loop_s": t["loop"], "vectorized_s": t["vectorized"], "ratio": ratio, "epochs": args.epochs,
                          "num_nets": 5, "max_acc_diff": same, "repeats": args.repeats}, table)


if __name__ == "__main__":
    main()
