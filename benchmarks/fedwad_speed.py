"""FedWaD's speed experiment (official `runningtime_expe.py`): time of FedWaD with a small
support (n_supp = 10) and with n_supp = n, 20 iterations, over the exact `ot.emd2` on the same
samples (X_s ~ N(0, I), X_t ~ N(4/sqrt(d) 1, I), n points each, d = 50), with both relative errors
and what a client sends per iteration (n_supp x d floats) against the n x d it keeps.

    python benchmarks/fedwad_speed.py            # n = 100, 500, 2000
    python benchmarks/fedwad_speed.py --small    # n = 100, 500
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import ot

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common_bench import best_of, save  # noqa: E402
from methods.fedwad import fedwad  # noqa: E402
from methods.fedwad.data import gaussian_pair  # noqa: E402
from methods.fedwad.transport import EMD_MAX_ITER  # noqa: E402

DIM, ITERS, SMALL_SUPP = 50, 20, 10



def row(n: int, repeats: int) -> dict:
    xs, xt = gaussian_pair(n, n, DIM, 4.0, seed=0)
    t_exact, w2 = best_of(lambda: ot.emd2([], [], ot.dist(xs, xt), numItermax=EMD_MAX_ITER), repeats)
    exact = float(np.sqrt(w2))
    out = {"n": n, "exact": exact, "exact_s": t_exact}
    for name, n_supp, t, scale in (("small", SMALL_SUPP, 0.5, 10.0), ("full", n, 0.5, 10.0),
                                   ("small_random_t", SMALL_SUPP, None, 1.0), ("full_random_t", n, None, 1.0)):
        # the official speed run: t = 0.5, eta^0 ~ N(0, 10^2); then the method's defaults (t ~ U(0, 1), N(0, 1))
        sec, res = best_of(lambda: fedwad(xs, xt, n_supp=n_supp, n_iter=ITERS, t=t, seed=1, init_scale=scale),
                           repeats)
        out[name] = {"n_supp": n_supp, "t": t, "init_scale": scale, "seconds": sec, "ratio": sec / t_exact,
                     "rel_err": (res.estimate - exact) / exact, "floats_sent": n_supp * DIM, "floats_kept": n * DIM}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="n = 100, 500 only")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    sizes = (100, 500) if args.small else (100, 500, 2000)
    rows = []
    for n in sizes:
        rows.append(row(n, args.repeats))
        print(f"n={n} done", flush=True)
    lines = ["| n | exact ot.emd2 (s) | n_supp | t | FedWaD s | × exact | rel. error | floats sent / client / "
             "iteration | floats kept |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for key in ("small", "full", "small_random_t", "full_random_t"):
            f = r[key]
            lines.append(f"| {r['n']} | {r['exact_s']:.3f} | {f['n_supp']} | {'U(0, 1)' if f['t'] is None else f['t']} "
                         f"| {f['seconds']:.3f} | {f['ratio']:.2f} | {f['rel_err']:.1e} | {f['floats_sent']} "
                         f"| {f['floats_kept']} |")
    lines += ["", f"d = {DIM}, {ITERS} iterations, one CPU thread, best of {args.repeats}. t = 0.5 with "
              f"η⁰ ~ N(0, 10²) is the official speed run (`runningtime_expe.py`); t ~ U(0, 1) with η⁰ ~ N(0, 1) "
              f"is the method's default. FedWaD's time counts the three exact OT problems of each iteration "
              f"(two clients, the server) run in turn in one process; a client sends n_supp · d floats per "
              f"iteration and keeps its n · d."]
    table = "\n".join(lines)
    print(table)
    save("fedwad_speed", {"rows": rows, "dim": DIM, "iterations": ITERS, "repeats": args.repeats}, table)


if __name__ == "__main__":
    main()
