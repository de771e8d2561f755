"""Crystalformer throughput (structures/s) for training and inference against cell size and
batch size, peak memory, and the speed-up of the image-softmax formulation over a plain loop
reference of the same attention (explicit loops over atoms i, j and translations n).

    python benchmarks/crystalformer_throughput.py [--quick] -> table + benchmarks/results/crystalformer_throughput.json
"""
import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.common_bench import save  # noqa: E402
from methods.crystalformer import Crystalformer, collate  # noqa: E402


def crystal(n_atoms: int, seed: int) -> dict:
    """A random cell holding n_atoms at ~12 Å³ per atom (typical of ionic solids)."""
    rng = np.random.default_rng(seed)
    side = (12.0 * n_atoms) ** (1 / 3)
    lattice = np.eye(3) * side + rng.normal(0, 0.2, (3, 3))
    z = rng.choice([3, 8, 9, 11, 12, 17, 20], n_atoms)
    return {"z": z, "pos": rng.random((n_atoms, 3)) @ lattice, "lattice": lattice, "target": float(rng.normal())}


def throughput(model, crystals, batch: int, train: bool, repeats: int = 3) -> float:
    opt = torch.optim.AdamW(model.parameters(), 1e-4)
    b = collate(crystals[:batch], reach=model.reach)        # edges cached per crystal, as in training
    model.train(train)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        if train:
            loss, _ = model.training_step(b)
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            with torch.no_grad():
                model(b)
        times.append(time.perf_counter() - t0)
    return batch / float(np.median(times[1:]))


def attention_vs_loops(model, c) -> tuple[float, float]:
    """Seconds of one forward of the first attention layer (float64, an 8-atom cell): the
    image-softmax implementation vs the α/β formula as loops over i, j, n (the test's reference)."""
    import copy

    from tests.test_crystalformer import slow_attention
    att = copy.deepcopy(model.blocks[0].attn).double().eval()
    b = collate([c], reach=model.reach)
    x = torch.randn(len(c["z"]), att.dim, dtype=torch.float64)
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(5):
            att(x, b["src"], b["dst"], b["r2"])
        fast = (time.perf_counter() - t0) / 5
        t0 = time.perf_counter()
        slow_attention(att, x, c, model.reach)
        slow = time.perf_counter() - t0
    return fast, slow


def one(n: int, bsz: int) -> dict:
    """Throughputs of the paper-size model for one (cell size, batch); peak RSS above the start."""
    torch.manual_seed(0)
    model = Crystalformer()                                  # the paper's size (~856K parameters)
    model.train()
    model(collate([crystal(8, 0)], reach=model.reach))      # fix m, s
    pool = [crystal(n, s) for s in range(bsz)]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tr = throughput(model, pool, bsz, train=True)
    inf = throughput(model, pool, bsz, train=False)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    return {"atoms": n, "batch": bsz, "train_per_s": tr, "infer_per_s": inf, "peak_mb": peak}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    sizes, batches = ((4, 16), (8, 32)) if args.quick else ((4, 8, 16, 32), (8, 32, 128))
    rows = []
    for n in sizes:
        for bsz in batches:     # a fresh process each, so the peak memory is this setting's own
            out = subprocess.run([sys.executable, __file__, "--one", str(n), str(bsz)], capture_output=True,
                                 text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    torch.manual_seed(0)
    fast, slow = attention_vs_loops(Crystalformer(), crystal(8, 0))
    lines = ["| atoms/cell | batch | train structures/s | inference structures/s | peak memory above start (MB) |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['atoms']} | {r['batch']} | {r['train_per_s']:.0f} | {r['infer_per_s']:.0f} | "
              f"{r['peak_mb']:.0f} |" for r in rows]
    lines += ["", f"One attention layer on an 8-atom cell (float64): {fast * 1e3:.2f} ms vectorised vs "
              f"{slow * 1e3:.0f} ms as loops over i, j, n ({slow / fast:.0f}× faster)."]
    table = "\n".join(lines)
    print(table)
    save("crystalformer_throughput", {"rows": rows, "attention_fast_s": fast, "attention_loop_s": slow,
                                      "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
