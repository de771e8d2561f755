"""Stacked Tempering's cost per sweep (issue #53, "Benchmark"): time of one ST step on the stack
784-200-100-50 and of one PT step (K = 6 replicas of RBM 1) over one Gibbs sweep of RBM 1, 40 chains,
same process, interleaved. Expected: ST ≈ the flop ratio sum_l N_l M_l / N_1 M_1 ≈ 1.16 plus the
swap's free energies; PT ≈ K = 6 plus its energies.

    OMP_NUM_THREADS=1 python benchmarks/stacked_tempering_sweep.py [--sweeps 50] [--repeats 5]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common_bench import interleaved, save  # noqa: E402
from methods.stacked_tempering import (BinaryRBM, gibbs_step, init_stack, linear_betas,  # noqa: E402
                                       parallel_tempering_step, stack_cost, stacked_tempering_step)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweeps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chains", type=int, default=40)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    rbms = [BinaryRBM(784, 200, 0.05, g), BinaryRBM(200, 100, 0.05, g), BinaryRBM(100, 50, 0.05, g)]
    v0 = (torch.rand(args.chains, 784, generator=g) < 0.2).float()
    betas = linear_betas(6, 0.6)

    def gibbs():
        v = v0
        for _ in range(args.sweeps):
            v, _ = gibbs_step(rbms[0], v, g)

    def st():
        vs, hs = init_stack(rbms, v0, g)
        for t in range(1, args.sweeps + 1):
            vs, hs = stacked_tempering_step(rbms, vs, hs, t, g)

    def pt():
        vs, hs = [v0] * 6, [rbms[0].sample_h(v0, g)] * 6
        for t in range(1, args.sweeps + 1):
            vs, hs = parallel_tempering_step(rbms[0], betas, vs, hs, t, g)

    with torch.no_grad():
        sec = interleaved({"gibbs": gibbs, "st": st, "pt": pt}, args.repeats)
    rows = {k: {"seconds_per_sweep": v / args.sweeps, "ratio_to_gibbs": v / sec["gibbs"]} for k, v in sec.items()}
    table = "\n".join(["| sampler | s / sweep | × Gibbs | expected |", "|---|---|---|---|"]
                      + [f"| {k} | {r['seconds_per_sweep']:.2e} | {r['ratio_to_gibbs']:.2f} | {e} |"
                         for (k, r), e in zip(rows.items(), ["1", f"{stack_cost(rbms):.2f} (flops)", "6 (K)"])])
    print(table)
    save("stacked_tempering_sweep", {"chains": args.chains, "sweeps": args.sweeps, "threads": torch.get_num_threads(),
                                     "rows": rows, "flop_ratio": stack_cost(rbms)}, table)


if __name__ == "__main__":
    main()
