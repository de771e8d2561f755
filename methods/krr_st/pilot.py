"""The pilot on tuning seeds (never reported): every row once per seed, each pretrained student
transferred at several k (labels per class), accuracy on the validation part of MNIST 5k train.
    OMP_NUM_THREADS=1 python -m methods.krr_st.pilot --seeds 10,11,12 --ks 5,10 --lrs 1e-3,1e-2
Prints per-seed metrics and the paired gaps (mean, sd over seeds) of krr_st against each row."""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from common.config import compose_checked
from common.runner import open_run
from methods.krr_st import prepare, pretrained_student, transfer_metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="10,11,12")
    ap.add_argument("--ks", default="5,10")
    ap.add_argument("--lrs", default="1e-3,1e-2")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--out", default="runs/krr_st_pilot.json")
    args = ap.parse_args()
    seeds, ks = [int(s) for s in args.seeds.split(",")], [int(k) for k in args.ks.split(",")]
    lrs = [float(v) for v in args.lrs.split(",")]
    rows = {f"krr_st_lr{lr:g}": ("krr_st", [f"method.distill.lr={lr}"]) for lr in lrs}
    rows.update({r: (r, []) for r in ("random_target", "krr_sup", "random_sup", "kmeans_sup", "no_pretrain",
                                      "full_target")})
    res: dict = {}
    for seed in seeds:
        base = ["method=krr_st", f"seed={seed}", "method.target.eval_on=val", "hardware.threads=1",
                f"method.distill.steps={args.steps}", "run_name=krr_st_pilot"]
        with open_run(compose_checked(base)) as ctx:
            d = prepare(ctx.cfg, ctx)
            for name, (row, over) in rows.items():
                cfg = compose_checked(base + over)
                torch.manual_seed(seed)
                student, stats = pretrained_student(cfg, ctx, row, d, seed)
                for k in ks:
                    torch.manual_seed(seed)
                    m = transfer_metrics(cfg, student, d, seed, k)
                    res.setdefault(f"k{k}", {}).setdefault(name, {})[seed] = m
                    print(json.dumps({"seed": seed, "k": k, "row": name, **m, **stats}), flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    for k, table in res.items():
        for metric in ("finetune_acc", "probe_acc"):
            print(f"== {k} {metric}")
            for name, per in table.items():
                print(f"  {name:16s} " + " ".join(f"{per[s][metric]:6.2f}" for s in seeds))
            for a in [n for n in table if n.startswith("krr_st")]:
                for b in table:
                    if b.startswith("krr_st"):
                        continue
                    gaps = [table[a][s][metric] - table[b][s][metric] for s in seeds]
                    sd = statistics.stdev(gaps) if len(gaps) > 1 else float("nan")
                    print(f"  {a} - {b}: {statistics.mean(gaps):+.2f} (sd {sd:.2f}) {['%+.1f' % g for g in gaps]}")


if __name__ == "__main__":
    main()
