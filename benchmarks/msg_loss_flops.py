"""MSG (issue #48): training loss against training FLOPs for the rows of a recorded msg table
(the runs' own logs, runs/<table>/<row>/seed*/metrics.jsonl), mean over seeds, msg's growths marked.
No training: it reads what `scripts/reproduce.py msg --tier mini` wrote.

    python benchmarks/msg_loss_flops.py [--table msg_mini] [--seeds 0,1,2]  -> benchmarks/results/<table>_loss_flops.png
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from common.nn.gpt import GPT, GPTConfig  # noqa: E402
from methods.msg import corpus  # noqa: E402
from methods.msg.train import _msg_stage_steps, train_flops  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def flops_at(cfg, steps: list[int]) -> tuple[list[float], list[float]]:
    """(cumulative training FLOPs after each logged step, FLOPs at msg's growth steps) of the run."""
    d, m = cfg.method.data, cfg.method.model
    vocab = corpus(str(d.source), float(d.val_fraction), int(d.split_seed))[0].vocab_size
    start = GPT(GPTConfig(vocab_size=vocab, n_positions=m.n_positions, n_embd=m.n_embd, n_layer=m.n_layer,
                          n_head=m.n_head, n_inner=m.n_inner))
    stages = _msg_stage_steps(cfg, start)
    b, t, mode = int(cfg.trainer.batch_size), int(m.n_positions), str(cfg.method.msg.mode)
    if mode.startswith("scratch"):
        stages = [(stages[-1][0], 10 ** 9)]
    elif mode == "small_only":
        stages = [(start.config, 10 ** 9)]

    def at(step):
        done, total = 0, 0
        for c, k in stages:
            take = max(0, min(k, step - done))
            total += train_flops([(c, take, b, t)])
            done += k
        return float(total)
    marks = [at(s) for s, _ in [(sum(k for _, k in stages[:i + 1]), None) for i in range(len(stages) - 1)]] \
        if mode in ("msg", "no_mask", "net2net") else []
    return [at(s) for s in steps], marks


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", default="msg_mini")
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for row_dir in sorted((ROOT / "runs" / args.table).iterdir()):
        seeds = [row_dir / f"seed{s}" / "metrics.jsonl" for s in args.seeds.split(",")]
        seeds = [p for p in seeds if (p.parent / "metrics.json").exists()]   # finished runs only
        if not seeds:
            continue
        logs = [[json.loads(line) for line in p.read_text().splitlines() if '"loss"' in line] for p in seeds]
        n = min(len(lg) for lg in logs)
        steps = [r["step"] for r in logs[0][:n]]
        loss = np.mean([[r["loss"] for r in lg[:n]] for lg in logs], axis=0)
        x, marks = flops_at(OmegaConf.load(seeds[0].parent / "config.yaml"), steps)
        ax.plot(np.array(x) / 1e12, loss, label=f"{row_dir.name} ({len(seeds)} seeds)")
        for i, f in enumerate(marks):
            ax.axvline(f / 1e12, color="grey", ls=":", label="msg growths" if i == 0 else None)
    ax.set_xlabel("training FLOPs (1e12)")
    ax.set_ylabel("training loss (mean over seeds)")
    ax.set_title(f"{args.table}: loss against FLOPs")
    ax.legend()
    tag = "" if args.seeds == "0,1,2" else "_" + args.seeds.replace(",", "_")
    out = ROOT / "benchmarks" / "results" / f"{args.table}{tag}_loss_flops.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
