"""torch.profiler table of one mini-tier training step (benchmarks/vcas_backward.py's mini ViT,
batch 128, one thread): exact autograd against VCAS at the mini table's ratios, fused block
backward (methods/vcas/block.py) and the generic per-linear path. Self CPU time per op, ms per
step, the ops that take most of a step.

    python benchmarks/vcas_profile.py -> markdown table + benchmarks/results/vcas_profile.json
"""
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from benchmarks.common_bench import save  # noqa: E402
from benchmarks.vcas_backward import MINI_BATCH, mini_ratios  # noqa: E402
from common.nn import ViTClassifier  # noqa: E402
from methods.vcas import Sampled  # noqa: E402

STEPS, TOP, ROUNDS = 10, 14, 3


def make(mode, rho=None, nu=None, fuse=True):
    torch.manual_seed(0)
    net = ViTClassifier(28, 1, 10, patch_size=7, dim=64, depth=4, heads=4)
    model = Sampled(net, net.blocks, mode=mode, every=10**9, m=2)
    if mode == "vcas":
        model.rho.copy_(torch.tensor(rho))
        model.nu.copy_(torch.tensor(nu))
        model.state.fuse = fuse
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def main():
    torch.set_num_threads(1)
    rho, nu, _, _ = mini_ratios()
    x = torch.randint(0, 256, (MINI_BATCH, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (MINI_BATCH,))
    variants = {"exact": make("exact"), "vcas fused": make("vcas", rho, nu), "vcas generic": make("vcas", rho, nu, False)}
    # CPU seconds of each phase (process_time: robust to the other jobs of a shared machine, which the
    # profiler's wall-clock op times are not), interleaved rounds, medians
    phases = {k: {"forward": [], "backward": [], "optimizer": []} for k in variants}
    for rnd in range(ROUNDS + 1):
        for name, (model, opt) in variants.items():
            acc = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
            for _ in range(10):
                t0 = time.process_time()
                loss, _ = model.training_step((x, y))
                t1 = time.process_time()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                t2 = time.process_time()
                opt.step()
                t3 = time.process_time()
                acc["forward"] += t1 - t0
                acc["backward"] += t2 - t1
                acc["optimizer"] += t3 - t2
            if rnd:
                for ph, v in acc.items():
                    phases[name][ph].append(1e3 * v / 10)
    med = {k: {ph: statistics.median(v) for ph, v in d.items()} for k, d in phases.items()}
    phase_lines = ["| phase (CPU ms / step) | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    for ph in ("forward", "backward", "optimizer"):
        phase_lines.append(f"| {ph} | " + " | ".join(f"{med[k][ph]:.1f}" for k in variants) + " |")
    phase_lines.append("| **step** | " + " | ".join(f"**{sum(med[k].values()):.1f}**" for k in variants) + " |")
    per_op = {}
    for name, (model, opt) in variants.items():
        def step():
            loss, _ = model.training_step((x, y))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(STEPS):
                step()
        per_op[name] = {e.key: e.self_cpu_time_total / 1e3 / STEPS for e in prof.key_averages()}
    totals = {k: sum(v.values()) for k, v in per_op.items()}
    ops = sorted(set().union(*per_op.values()), key=lambda o: -max(v.get(o, 0.0) for v in per_op.values()))[:TOP]
    lines = phase_lines + ["", f"CPU time per phase, medians of {ROUNDS} interleaved rounds of 10 steps.", ""]
    lines += ["| op (self CPU, ms / step under the profiler) | " + " | ".join(variants) + " |",
             "|---|" + "---|" * len(variants)]
    for o in ops:
        lines.append(f"| `{o[:60]}` | " + " | ".join(f"{per_op[k].get(o, 0.0):.2f}" for k in variants) + " |")
    lines.append("| **all ops** | " + " | ".join(f"**{totals[k]:.1f}**" for k in variants) + " |")
    lines += ["", f"Mini ViT step (batch {MINI_BATCH}, one thread), mean of {STEPS} profiled steps; ratios ρ = "
              f"{', '.join(f'{r:.2f}' for r in rho)}, mean ν = {sum(nu) / len(nu):.2f}. The profiler's own "
              "overhead inflates every op, and its times are wall clock, inflated by the other jobs of the "
              f"machine (load average {os.getloadavg()[0]:.1f} on 2 cores): compare columns."]
    table = "\n".join(lines)
    print(table)
    save("vcas_profile", {"steps": STEPS, "rho": rho, "nu": nu, "per_op_ms": per_op, "total_ms": totals,
                          "phases_cpu_ms": med, "load": list(os.getloadavg())}, table)


if __name__ == "__main__":
    main()
