"""The pilot on tuning seeds (never reported): per seed and per m (num_images), the rows once each,
each pretrained student transferred at several k (labels per class); accuracy on the validation
part of MNIST 5k train. The m-independent rows (no_pretrain, full_target) run once per seed.
    OMP_NUM_THREADS=1 python -m methods.krr_st.pilot --seeds 10,11,12 --ms 10,20 --ks 5,10
--regimes lr:steps,... runs the outer-loop-dependent rows (krr_st, then perturbed_target, which
matches its move) once per outer regime, the others once per m:
    OMP_NUM_THREADS=1 python -m methods.krr_st.pilot --ms 20 --ks 10,20 --regimes 1e-2:500,3e-3:500,1e-2:1000,3e-3:1000
Prints per-seed metrics and the paired gaps (mean, sd over seeds) of krr_st against each row."""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from common.config import compose_checked
from common.runner import open_run
from methods.krr_st import prepare, pretrained_student, transfer_metrics

PER_M = ("krr_st", "perturbed_target", "random_target", "shuffled_target", "random_sup")
PER_REGIME = ("krr_st", "perturbed_target")   # these depend on the outer loop's lr and steps
ONCE = ("no_pretrain", "full_target")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="10,11,12")
    ap.add_argument("--ms", default="10,20")
    ap.add_argument("--ks", default="5,10")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--regimes", default="", help="lr:steps,... (default: --lr:--steps)")
    ap.add_argument("--rows", default=",".join(PER_M))
    ap.add_argument("--out", default="runs/krr_st_pilot.json")
    args = ap.parse_args()
    seeds, ks = [int(s) for s in args.seeds.split(",")], [int(k) for k in args.ks.split(",")]
    ms, per_m = [int(v) for v in args.ms.split(",")], args.rows.split(",")
    regimes = [(float(a), int(b)) for a, b in (r.split(":") for r in args.regimes.split(","))] if args.regimes \
        else [(args.lr, args.steps)]
    tag = (lambda lr, st: "") if len(regimes) == 1 else (lambda lr, st: f"lr{lr:g}_s{st}/")
    res: dict = {}

    def record(seed, name, cfg, ctx, row, d):
        torch.manual_seed(seed)
        student, stats = pretrained_student(cfg, ctx, row, d, seed)
        for k in ks:
            torch.manual_seed(seed)
            met = transfer_metrics(cfg, student, d, seed, k)
            res.setdefault(f"k{k}", {}).setdefault(name, {})[seed] = met
            print(json.dumps({"seed": seed, "k": k, "row": name, **met, **stats}), flush=True)

    for seed in seeds:
        base = ["method=krr_st", f"seed={seed}", "method.target.eval_on=val", "hardware.threads=1",
                f"method.distill.steps={args.steps}", f"method.distill.lr={args.lr}", "run_name=krr_st_pilot"]
        with open_run(compose_checked(base)) as ctx:
            d = prepare(ctx.cfg, ctx)
            for row in ONCE:
                record(seed, row, ctx.cfg, ctx, row, d)
            for m in ms:
                cfg = compose_checked(base + [f"method.num_images={m}"])
                for row in [r for r in per_m if r not in PER_REGIME]:
                    record(seed, f"m{m}/{row}", cfg, ctx, row, d)
                for lr, st in regimes:
                    rcfg = compose_checked(base + [f"method.num_images={m}", f"method.distill.lr={lr}",
                                                   f"method.distill.steps={st}"])
                    for row in [r for r in per_m if r in PER_REGIME]:
                        record(seed, f"m{m}/{tag(lr, st)}{row}", rcfg, ctx, row, d)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    for k, table in res.items():
        for metric in ("finetune_acc", "probe_acc"):
            print(f"== {k} {metric}")
            for name, per in table.items():
                print(f"  {name:24s} " + " ".join(f"{per[s][metric]:6.2f}" for s in seeds))
            for a in [n for n in table if n.endswith("/krr_st")]:
                pre = a.rsplit("/", 1)[0]          # m<m>[/lr.._s..]: its own perturbed_target, the shared rows
                others = [b for b in table if b != a and (b.rsplit("/", 1)[0] == pre or b.count("/") == 1
                          and b.split("/")[0] == a.split("/")[0])] + list(ONCE)
                for b in others:
                    gaps = [table[a][s][metric] - table[b][s][metric] for s in seeds]
                    sd = statistics.stdev(gaps) if len(gaps) > 1 else float("nan")
                    print(f"  {a} - {b}: {statistics.mean(gaps):+.2f} (sd {sd:.2f}) {['%+.1f' % g for g in gaps]}")


if __name__ == "__main__":
    main()
