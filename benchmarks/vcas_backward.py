"""Wall time of VCAS's sampled backward against exact autograd, measured in the same process.

1. Transformer blocks (timm ViT blocks, T = 196 tokens, batch 32) at fixed keep ratios ρ = ν:
   forward and backward time over exact's. The sampled path keeps the exact forward graph and
   samples in the backward (no recomputation), so ρ = ν = 1 should cost what exact costs.
2. End to end: a full training step (forward, backward, AdamW) of the mini-tier ViT
   (configs/method/vcas.yaml: d = 64, 4 blocks, 16 tokens, batch 128), exact against VCAS at
   ρ = ν = 1 and at the ratios the controller reached in the mini table, with the fused block
   backward (methods/vcas/block.py) and with the generic per-linear path. Every measurement is a
   whole controller period (`every` steps; 100 for the "every 100" row), and the "+ controller"
   rows run the controller's passes once in it, so the controller is amortised in every mode
   (`--quick` included). Ratios: medians of per-round ratios to exact measured in the same round.

Times are CPU seconds of this one-thread process (time.process_time): on an idle machine the
same as wall time, and unlike wall time not inflated by the other jobs of a shared machine.

    python benchmarks/vcas_backward.py [--quick] [--mini-only] -> tables + benchmarks/results/vcas_backward.json
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from timm.models.vision_transformer import Block  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import save  # noqa: E402
from common.nn import ViTClassifier  # noqa: E402
from methods.vcas import Sampled, install  # noqa: E402

TOKENS, BATCH, DEPTH, RATIOS = 196, 32, 2, (1.0, 0.5, 0.25)
CLOCK = time.process_time
MINI_BATCH = 128


def _median_times(models: dict, run, repeats: int) -> dict:
    """Median seconds of run(model) -> (forward s, backward s); variants alternate within a round,
    round 0 warms up."""
    times = {k: ([], []) for k in models}
    for rep in range(repeats + 1):
        for k, m in models.items():
            f, b = run(m)
            if rep:
                times[k][0].append(f)
                times[k][1].append(b)
    return {k: (statistics.median(f), statistics.median(b)) for k, (f, b) in times.items()}


def blocks_case(dim: int, repeats: int) -> dict:
    torch.manual_seed(0)
    exact = nn.Sequential(*[Block(dim, num_heads=dim // 64, mlp_ratio=4.0) for _ in range(DEPTH)])
    x = torch.randn(BATCH, TOKENS, dim, requires_grad=True)
    gy = torch.randn(BATCH, TOKENS, dim)
    models = {"exact": exact}
    for r in RATIOS:
        m = copy.deepcopy(exact)
        state = install(m)
        state.rho, state.nu = [r] * state.num_blocks, [r] * state.num_linears
        models[f"rho=nu={r:g}"] = m

    def run(m):
        t0 = CLOCK()
        y = m(x)
        t1 = CLOCK()
        torch.autograd.backward(y, gy)
        t2 = CLOCK()
        x.grad = None
        m.zero_grad(set_to_none=True)
        return t1 - t0, t2 - t1

    med = _median_times(models, run, repeats)
    fe, be = med["exact"]
    return {k: {"forward_s": f, "backward_s": b, "backward_ratio": b / be, "step_ratio": (f + b) / (fe + be)}
            for k, (f, b) in med.items()}


MINI_RHO, MINI_NU = [0.57, 0.58, 0.58, 0.60], 0.71   # the mini table's final ratios (seeds 0-2, 2026-12-01)


def mini_ratios() -> tuple[list[float], list[float], int, int]:
    """ρ per block and ν per linear the controller reached in the mini table (seed mean, from the
    runs' checkpoints when they are here, else the table's recorded means), and its cadence."""
    import yaml
    cfg = yaml.safe_load((ROOT / "configs/experiment/vcas_mini.yaml").read_text())
    every = cfg["method"]["model"]["every"]
    rhos, nus = [], []
    try:
        runs = json.loads((ROOT / "results/vcas_mini.json").read_text())["tables"][0]["runs"]["vcas"]
        for r in runs:
            state = torch.load(ROOT / r["run_dir"] / "checkpoint.pt", map_location="cpu", weights_only=True)["model"]
            rhos.append(state["rho"])
            nus.append(state["nu"])
    except (OSError, KeyError, IndexError, RuntimeError):   # no checkpoints here: the recorded means
        return list(MINI_RHO), [MINI_NU] * 16, every, 2
    return torch.stack(rhos).mean(0).tolist(), torch.stack(nus).mean(0).tolist(), every, 2


def run_average_ratios() -> tuple[float, float]:
    """Mean ρ and ν over the logged steps of the mini table's VCAS runs (what its step_cpu_ms
    averages over: ρ = ν = 1 until the first controller update, then the controller's descent)."""
    rho, nu = [], []
    try:
        runs = json.loads((ROOT / "results/vcas_mini.json").read_text())["tables"][0]["runs"]["vcas"]
        for r in runs:
            for line in (ROOT / r["run_dir"] / "metrics.jsonl").read_text().splitlines():
                row = json.loads(line)
                if "rho_mean" in row:
                    rho.append(row["rho_mean"])
                    nu.append(row["nu_mean"])
    except (OSError, KeyError, IndexError):
        pass
    return (sum(rho) / len(rho), sum(nu) / len(nu)) if rho else (0.68, 0.75)   # the table of 2026-12-01


def end_to_end(repeats: int, every: int | None = None) -> dict:
    """ms per training step of the mini ViT, each measurement a whole controller period: `every`
    consecutive AdamW steps, the controller's passes (M forwards, M exact and M² SampleA
    backwards) run once in it for the "+ controller" rows, so they are amortised in every mode.
    Variants alternate within a round (round 0 warms up); medians over rounds; the ratio is the
    median of the per-round ratios to exact measured in the same round."""
    rho, nu, cadence, m = mini_ratios()
    avg_rho, avg_nu = run_average_ratios()
    every = every or cadence
    torch.manual_seed(0)
    x = torch.randint(0, 256, (MINI_BATCH, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (MINI_BATCH,))
    batch = (x, y)

    def make(mode, rho_l=None, nu_l=None, controller=None, fuse=True):
        torch.manual_seed(0)
        net = ViTClassifier(28, 1, 10, patch_size=7, dim=64, depth=4, heads=4)
        model = Sampled(net, net.blocks, mode=mode, every=controller or 10**9, m=m)
        if mode == "vcas":
            model.rho.copy_(torch.tensor(rho_l))
            model.nu.copy_(torch.tensor(nu_l))
            model.state.fuse = fuse
            model.controller.update = lambda est: None        # hold the ratios fixed
            model.controller_batches = lambda step: [batch] * m
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4)

    models = {"exact": make("exact"), "rho=nu=1": make("vcas", [1.0] * 4, [1.0] * 16),
              "mini ratios, generic backward": make("vcas", rho, nu, fuse=False),
              "mini ratios": make("vcas", rho, nu),
              f"mini ratios + controller every {every}": make("vcas", rho, nu, controller=every),
              "mini ratios + controller every 100": make("vcas", rho, nu, controller=100),
              f"run-average ratios + controller every {every}": make("vcas", [avg_rho] * 4, [avg_nu] * 16,
                                                                      controller=every)}
    periods = {k: (100 if k.endswith("every 100") else every) for k in models}

    def run(name):
        model, opt = models[name]
        steps = periods[name]
        t0 = CLOCK()
        for _ in range(steps):
            loss, _ = model.training_step(batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return (CLOCK() - t0) / steps

    times = {k: [] for k in models}
    for rep in range(repeats + 1):
        for k in models:
            t = run(k)
            if rep:
                times[k].append(t)
    out = {}
    for k, (model, _) in models.items():
        ratios = [a / b for a, b in zip(times[k], times["exact"])]
        out[k] = {"step_ms": 1e3 * statistics.median(times[k]), "step_ratio": statistics.median(ratios),
                  "ratio_min": min(ratios), "ratio_max": max(ratios), "steps_per_round": periods[k],
                  "controller_runs": int(model.official[1]) if model.mode == "vcas" else 0,
                  "flops_reduction": model.flops_reduction()["flops_reduction"]}
    return {"rho": rho, "nu_mean": sum(nu) / len(nu), "run_average_rho": avg_rho, "run_average_nu": avg_nu,
            "every": every, "repeats": repeats, "cases": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="d = 384 only, 2 repeats, 2 rounds end to end")
    ap.add_argument("--mini-only", action="store_true",
                    help="re-measure the mini step only; keep the recorded block rows of the JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dims, repeats = ((384,), 2) if args.quick else ((384, 768), 3)
    payload = {"tokens": TOKENS, "batch": BATCH, "depth": DEPTH, "threads": torch.get_num_threads(),
               "device": "cpu", "blocks": {}, "load_before": list(os.getloadavg())}
    lines = ["| d | keep ratios | backward s | backward / exact | fwd+bwd / exact |", "|---|---|---|---|---|"]
    if args.mini_only:
        recorded = json.loads((ROOT / "benchmarks/results/vcas_backward.json").read_text())
        payload["blocks"], payload["blocks_measured"] = recorded["blocks"], recorded["provenance"]["time"][:10]
    for d in dims:
        res = payload["blocks"][str(d)] if args.mini_only else blocks_case(d, repeats)
        payload["blocks"][str(d)] = res
        for k, r in res.items():
            lines.append(f"| {d} | {k} | {r['backward_s']:.3f} | {r['backward_ratio']:.2f} | {r['step_ratio']:.2f} |")
    e2e = end_to_end(2 if args.quick else 5)
    payload["mini_step"], payload["load_after"] = e2e, list(os.getloadavg())
    lines += ["", f"Mini ViT training step (batch {MINI_BATCH}; the mini table's final ratios: ρ = "
              f"{', '.join(f'{r:.2f}' for r in e2e['rho'])}, mean ν = {e2e['nu_mean']:.2f}; its run averages: "
              f"ρ = {e2e['run_average_rho']:.2f}, ν = {e2e['run_average_nu']:.2f}):", "",
              "| variant | steps per round | ms / step | / exact (median [min, max] over rounds) | FLOPs saved % |",
              "|---|---|---|---|---|"]
    for k, r in e2e["cases"].items():
        lines.append(f"| {k} | {r['steps_per_round']} | {r['step_ms']:.1f} | {r['step_ratio']:.2f} "
                     f"[{r['ratio_min']:.2f}, {r['ratio_max']:.2f}] | {r['flops_reduction']:.1f} |")
    lb, la = payload["load_before"], payload["load_after"]
    lines += ["", f"{e2e['repeats']} timed rounds after a warm-up round; load average {lb[0]:.1f} before and "
              f"{la[0]:.1f} after on 2 cores (CPU seconds of this process: ratios, not milliseconds, carry over)"
              + (f"; block rows measured {payload['blocks_measured']}." if args.mini_only else ".")]
    table = "\n".join(lines)
    print(table)
    save("vcas_backward", payload, table)


if __name__ == "__main__":
    main()
