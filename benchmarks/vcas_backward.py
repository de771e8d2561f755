"""Wall time of VCAS's backward through transformer blocks at fixed keep ratios, as ratios
against exact autograd in the same process (two timm ViT blocks, T = 196 tokens, batch 64).

The sampled path runs the forward without a graph and, in the backward, recomputes the
block on the kept samples only (the gather): its backward therefore includes a forward
over ρ·N samples, which is why ρ = ν = 1 costs more than exact.

    python benchmarks/vcas_backward.py [--quick] -> table + benchmarks/results/vcas_backward.json
"""
import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from timm.models.vision_transformer import Block  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import save  # noqa: E402
from methods.vcas.sampling import SamplingState, install  # noqa: E402

TOKENS, BATCH, DEPTH, RATIOS = 196, 64, 2, (1.0, 0.5, 0.25)


def case(dim: int, repeats: int) -> dict:
    torch.manual_seed(0)
    exact = nn.Sequential(*[Block(dim, num_heads=dim // 64, mlp_ratio=4.0) for _ in range(DEPTH)])
    x = torch.randn(BATCH, TOKENS, dim, requires_grad=True)
    gy = torch.randn(BATCH, TOKENS, dim)
    models = {"exact": exact}
    for r in RATIOS:
        m = copy.deepcopy(exact)
        install(m, SamplingState(DEPTH, rho=[r] * DEPTH, nu=[r] * DEPTH))
        models[f"rho=nu={r:g}"] = m
    times = {k: ([], []) for k in models}
    for rep in range(repeats + 1):            # round 0 warms up; variants alternate within a round
        for k, m in models.items():
            t0 = time.perf_counter()
            y = m(x)
            t1 = time.perf_counter()
            torch.autograd.backward(y, gy)
            t2 = time.perf_counter()
            x.grad = None
            m.zero_grad(set_to_none=True)
            if rep:
                times[k][0].append(t1 - t0)
                times[k][1].append(t2 - t1)
    med = {k: (statistics.median(f), statistics.median(b)) for k, (f, b) in times.items()}
    fe, be = med["exact"]
    return {k: {"forward_s": f, "backward_s": b, "backward_ratio": b / be, "step_ratio": (f + b) / (fe + be)}
            for k, (f, b) in med.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="d = 384 only, 2 repeats")
    args = ap.parse_args()
    dims, repeats = ((384,), 2) if args.quick else ((384, 768), 3)
    payload = {"tokens": TOKENS, "batch": BATCH, "depth": DEPTH, "threads": torch.get_num_threads(),
               "device": "cpu", "cases": {}}
    lines = ["| d | keep ratios | backward s | backward / exact | fwd+bwd / exact |", "|---|---|---|---|---|"]
    for d in dims:
        res = case(d, repeats)
        payload["cases"][str(d)] = res
        for k, r in res.items():
            lines.append(f"| {d} | {k} | {r['backward_s']:.3f} | {r['backward_ratio']:.2f} | {r['step_ratio']:.2f} |")
    table = "\n".join(lines)
    print(table)
    save("vcas_backward", payload, table)


if __name__ == "__main__":
    main()
