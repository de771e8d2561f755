"""The P²OT scaling solver against POT's generic solvers of the same problems: time and
iterations to tolerance, as ratios measured in one process.

    python benchmarks/p2ot_solver.py            -> N in {5120, 51200}, K in {10, 100, 1000}
    python benchmarks/p2ot_solver.py --small    -> N = 5120, K = 10, one repeat (a quick check)

* ρ = 1, λ = 1 (UOT, P²OT at the end of the ramp) vs `ot.unbalanced.sinkhorn_unbalanced`
  with reg_m = (inf, λ), reg_type = 'entropy': the same problem and the same plan.
* ρ = 0.5, λ = ∞ (POT's partial problem) vs `ot.partial.entropic_partial_wasserstein`
  (iterative Bregman projections, m = ρ, b = ρ/K): the same constraints, but its entropy does
  not cover the virtual column, so ⟨Q, C⟩ is reported for both. POT's solver multiplies by an
  (N, N) diagonal matrix every iteration (O(N²K) time, N² memory), so it runs only where
  N² doubles fit in `--pot-partial-max-gb`, for at most `--pot-partial-iters` iterations.
Both sides run in float64 on the CPU (torch for ours, numpy for POT).
"""
import argparse
import math
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common_bench import best_of, save  # noqa: E402
from methods.p2ot import solve_augmented  # noqa: E402

EPSILON, TOL = 0.1, 1e-6


def imbalanced_cost(n: int, k: int, seed: int = 0, dim: int = 64, ratio: float = 10.0) -> torch.Tensor:
    """−log softmax of cosine logits (scale 10) of points drawn around K unit centres with
    long-tailed cluster sizes (largest / smallest = ratio): (N, K) float64."""
    gen = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(k, dim, generator=gen, dtype=torch.float64), dim=1)
    weights = ratio ** (-torch.arange(k, dtype=torch.float64) / max(k - 1, 1))
    labels = torch.multinomial(weights / weights.sum(), n, replacement=True, generator=gen)
    x = centres[labels] + 0.15 * torch.randn(n, dim, generator=gen, dtype=torch.float64)
    protos = F.normalize(centres + 0.05 * torch.randn(k, dim, generator=gen, dtype=torch.float64), dim=1)
    return -torch.log_softmax(10.0 * F.normalize(x, dim=1) @ protos.T, dim=1)



def row_error(plan: np.ndarray, n: int) -> float:
    return float(np.abs(n * plan.sum(1) - 1.0).max())


def unbalanced_row(c: torch.Tensor, repeats: int) -> dict:
    import ot

    n, k = c.shape
    a, b, cn = np.full(n, 1 / n), np.full(k, 1 / k), c.numpy()
    t_ours, sol = best_of(lambda: solve_augmented(c, 1.0, EPSILON, 1.0, max_iter=10_000, tol=TOL), repeats)

    def pot():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return ot.unbalanced.sinkhorn_unbalanced(a, b, cn, EPSILON, reg_m=(math.inf, 1.0), reg_type="entropy",
                                                     stopThr=TOL, numItermax=10_000, log=True)
    t_pot, (plan, log) = best_of(pot, repeats)
    ours = sol.plan[:, :k].numpy()
    return {"ours_s": t_ours, "ours_iters": sol.iterations, "ours_row_err": sol.row_error,
            "pot_s": t_pot, "pot_iters": len(log["err"]), "pot_row_err": row_error(plan, n),
            "plan_rel_diff": float(np.abs(ours - plan).max() / plan.max()), "speedup": t_pot / t_ours}


def partial_row(c: torch.Tensor, repeats: int, max_gb: float, pot_iters: int) -> dict:
    import ot

    n, k = c.shape
    rho = 0.5
    t_ours, sol = best_of(lambda: solve_augmented(c, rho, EPSILON, math.inf, max_iter=10_000, tol=TOL), repeats)
    q = sol.plan[:, :k]
    row = {"ours_s": t_ours, "ours_iters": sol.iterations, "ours_row_err": sol.row_error,
           "ours_cost": float((q * c).sum())}
    if n * n * 8 / 2 ** 30 > max_gb:
        return row | {"pot": f"skipped: its (N, N) diagonal needs {n * n * 8 / 2 ** 30:.0f} GiB"}
    a, b = np.full(n, 1 / n), np.full(k, rho / k)
    t_pot, (plan, log) = best_of(lambda: ot.partial.entropic_partial_wasserstein(
        a, b, c.numpy(), EPSILON, m=rho, numItermax=pot_iters, stopThr=1e-9, log=True), 1)
    iters = min(10 * len(log["err"]), pot_iters)
    return row | {"pot_s": t_pot, "pot_iters": iters, "pot_cost": float((plan * c.numpy()).sum()),
                  "pot_row_violation": float(max(0.0, (n * plan.sum(1) - 1).max())),
                  "per_iter_speedup": (t_pot / iters) / (t_ours / sol.iterations)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="N = 5120, K = 10, one repeat, 20 POT partial iterations")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pot-partial-max-gb", type=float, default=0.5)
    parser.add_argument("--pot-partial-iters", type=int, default=50)
    args = parser.parse_args()
    if args.small:
        args.repeats, args.pot_partial_iters = 1, 20
    sizes = [(5120, 10)] if args.small else [(n, k) for n in (5120, 51200) for k in (10, 100, 1000)]
    rows = {}
    for n, k in sizes:
        c = imbalanced_cost(n, k)
        rows[f"N{n}_K{k}"] = {"unbalanced": unbalanced_row(c, args.repeats),
                              "partial": partial_row(c, args.repeats, args.pot_partial_max_gb, args.pot_partial_iters)}
        print(f"N={n} K={k} done", flush=True)
    lines = ["| N | K | UOT ours s (iters) | POT unbalanced s (iters) | POT / ours | partial ours s (iters) | "
             "POT partial s (iters) | per-iter POT / ours | ⟨Q,C⟩ ours / POT |", "|---|---|---|---|---|---|---|---|---|"]
    for key, r in rows.items():
        n, k = key[1:].split("_K")
        u, p = r["unbalanced"], r["partial"]
        if "pot_s" in p:
            pot_p = (f"{p['pot_s']:.3f} ({p['pot_iters']}) | {p['per_iter_speedup']:.1f} | "
                     f"{p['ours_cost']:.4f} / {p['pot_cost']:.4f}")
        else:
            pot_p = f"skipped | – | {p['ours_cost']:.4f} / –"
        lines.append(f"| {n} | {k} | {u['ours_s']:.3f} ({u['ours_iters']}) | {u['pot_s']:.3f} ({u['pot_iters']}) "
                     f"| {u['speedup']:.2f} | {p['ours_s']:.3f} ({p['ours_iters']}) | {pot_p} |")
    lines += ["", f"ε = {EPSILON}, tolerance {TOL} (ours: max row error; POT: its own criterion), float64, "
              f"{torch.get_num_threads()} CPU threads, best of {args.repeats}. UOT: ρ = 1, λ = 1, the same plan "
              f"(max relative difference {max(r['unbalanced']['plan_rel_diff'] for r in rows.values()):.1e}). "
              f"Partial: ρ = 0.5, λ = ∞; POT's iterations capped at {args.pot_partial_iters}."]
    table = "\n".join(lines)
    print(table)
    save("p2ot_solver", {"rows": rows, "epsilon": EPSILON, "tol": TOL, "small": args.small,
                         "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
