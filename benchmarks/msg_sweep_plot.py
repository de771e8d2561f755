"""MSG (issue #48): the one-knob schedule sweep (msg_mini_sweep, tuning seeds 10-12) read from the
record: validation loss against each knob (s1, s2, ramp; the others at the prototype's 150 / 300 / 20),
per seed and mean, scratch's band (std over seeds as the tables: ddof 0); and the paired differences to the base schedule and to scratch
as a markdown table. No training: it reads what `scripts/reproduce.py msg --tier mini --only
msg_mini_sweep` wrote to results/msg_mini.json.

    python benchmarks/msg_sweep_plot.py   -> benchmarks/results/msg_mini_sweep.png (+ the table on stdout)
"""
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BASE = {"s1": 150, "s2": 300, "ramp": 20}
KNOBS = {"s1": ["s1_50", "base", "s1_250"], "s2": ["s2_200", "base", "s2_400"], "ramp": ["ramp_5", "base", "ramp_50"]}


def knob_value(row: str, knob: str) -> int:
    return BASE[knob] if row == "base" else int(row.split("_")[-1])


def per_seed(table: dict, row: str, metric: str = "val_loss") -> dict[int, float]:
    return {r["seed"]: r[metric] for r in table["runs"][row]}


def paired(a: dict, b: dict) -> tuple[float, float, list[float]]:
    d = [a[s] - b[s] for s in sorted(a) if s in b]
    return float(np.mean(d)), float(np.std(d)) if len(d) > 1 else 0.0, d


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = json.loads((ROOT / "results" / "msg_mini.json").read_text())
    table = next(t for t in rec["tables"] if t["experiment"] == "msg_mini_sweep")
    base, scratch = per_seed(table, "base"), per_seed(table, "scratch")
    sflops = table["runs"]["scratch"][0]["train_flops"]
    print("| row | s1 | s2 | ramp | val_loss (mean ± std) | − base (paired) | − scratch (paired) | per seed − scratch | FLOPs / scratch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in ["base", "s1_50", "s1_250", "s2_200", "s2_400", "ramp_5", "ramp_50", "scratch"]:
        v = per_seed(table, row)
        vals = list(v.values())
        sz = {k: (knob_value(row, k) if row.startswith(k + "_") else BASE[k]) for k in BASE}
        db, dbs, _ = paired(v, base)
        ds, dss, dlist = paired(v, scratch)
        fl = table["runs"][row][0]["train_flops"] / sflops
        cells = [row, *(("—",) * 3 if row == "scratch" else tuple(str(sz[k]) for k in ("s1", "s2", "ramp"))),
                 f"{np.mean(vals):.3f} ± {np.std(vals):.3f}",
                 "" if row in ("base", "scratch") else f"{db:+.3f} ± {dbs:.3f}",
                 "" if row == "scratch" else f"{ds:+.3f} ± {dss:.3f}",
                 "" if row == "scratch" else ", ".join(f"{x:+.3f}" for x in dlist), f"{fl:.2f}"]
        print("| " + " | ".join(cells) + " |")
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
    s_mean, s_std = np.mean(list(scratch.values())), np.std(list(scratch.values()))
    for ax, (knob, rows) in zip(axes, KNOBS.items()):
        xs = [knob_value(r, knob) for r in rows]
        for seed in sorted(base):
            ax.plot(xs, [per_seed(table, r)[seed] for r in rows], "o-", color="0.7", lw=0.8, ms=3)
        ax.plot(xs, [np.mean(list(per_seed(table, r).values())) for r in rows], "o-", color="C0", lw=2,
                label="msg (mean; grey: seeds 10-12)")
        ax.axhspan(s_mean - s_std, s_mean + s_std, color="C3", alpha=0.15)
        ax.axhline(s_mean, color="C3", lw=1, label="scratch, 500 steps (± std)")
        for x, r in zip(xs, rows):
            ax.annotate(f"{table['runs'][r][0]['train_flops'] / sflops:.2f}× FLOPs", (x, 0.04),
                        xycoords=("data", "axes fraction"), ha="center", fontsize=8, color="C0")
        ax.margins(x=0.12)
        others = ", ".join(f"{k} {v}" for k, v in BASE.items() if k != knob)
        ax.set(xlabel=f"{knob} ({others}; N 500)", xticks=xs)
    axes[0].set_ylabel("validation loss (nats/char)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("msg_mini_sweep: one knob at a time around s1 150 / s2 300 / ramp 20 (labels: training FLOPs / scratch's)",
                 fontsize=10)
    fig.tight_layout()
    out = ROOT / "benchmarks" / "results" / "msg_mini_sweep.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"\n{out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
