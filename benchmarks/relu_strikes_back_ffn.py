"""ReLU Strikes Back (issue #47): `sparse_ffn` (only the neurons some token activates: the
down-projection columns, and the up-projection rows of a gated FFN) against the dense FFN, in one
process, for one token and a 32-token window, on SmolLM2's FFN shape (576 -> 1536, gated, random
weights) and ours (128 -> 512), at set sparsities (a ShiftedReLU whose shift is the pre-activation
quantile that zeroes that fraction on calibration inputs). Time ratio beside the FLOP ratio.
Target: time ratio <= 0.6 at >= 85 % sparsity for one token.

    python benchmarks/relu_strikes_back_ffn.py [--quick]  -> table + benchmarks/results/relu_strikes_back_ffn.json
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from methods.relu_strikes_back import ShiftedReLU, activation_sparsity, ffn_flops, sparse_ffn  # noqa: E402


def measure(name, d, inner, gated, sparsity, tokens, repeats):
    torch.manual_seed(0)
    up, down = nn.Linear(d, inner, bias=not gated), nn.Linear(inner, d, bias=not gated)
    gate = nn.Linear(d, inner, bias=False) if gated else None
    first = gate or up
    with torch.no_grad():
        calib = first(torch.randn(4096, d))
        act = ShiftedReLU(float(torch.quantile(calib.flatten()[:200000], sparsity)))
        x = torch.randn(1, tokens, d)
        h = act(first(x))
        dense_fn = (lambda: down(act(gate(x)) * up(x))) if gated else (lambda: down(act(up(x))))
        assert torch.allclose(sparse_ffn(x, up, act, down, gate=gate), dense_fn(), atol=1e-5)
        t = interleaved({"dense": dense_fn, "sparse": lambda: sparse_ffn(x, up, act, down, gate=gate)}, repeats, warmup=3)
    union = h.reshape(-1, inner).ne(0).any(0)     # sparse_ffn computes the union's columns for every token
    f = ffn_flops(h, d, gated=gated)
    union_sparse = 2.0 * tokens * d * inner + 2.0 * (2 if gated else 1) * tokens * d * float(union.sum())
    return {"ffn": name, "d": d, "inner": inner, "gated": gated, "tokens": tokens, "sparsity": activation_sparsity(h),
            "union_active": float(union.double().mean()), "flop_ratio_nnz": f["ratio"],
            "flop_ratio_union": union_sparse / f["dense"], "dense_us": 1e6 * t["dense"], "sparse_us": 1e6 * t["sparse"],
            "time_ratio": t["sparse"] / t["dense"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats = 20 if args.quick else 101
    rows = [measure(n, d, i, g, s, tok, repeats)
            for n, d, i, g in (("SmolLM2", 576, 1536, True), ("ours", 128, 512, False))
            for s in (0.85, 0.9, 0.95) for tok in (1, 32)]
    lines = ["| FFN | tokens | sparsity | union active | FLOP ratio (nnz) | FLOP ratio (union) | dense µs | sparse µs | time ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['ffn']} {r['d']}→{r['inner']}{' gated' if r['gated'] else ''} | {r['tokens']} | {r['sparsity']:.2f} | "
              f"{r['union_active']:.2f} | {r['flop_ratio_nnz']:.2f} | {r['flop_ratio_union']:.2f} | {r['dense_us']:.0f} | "
              f"{r['sparse_us']:.0f} | {r['time_ratio']:.2f} |" for r in rows]
    lines += ["", f"sparse_ffn against the dense FFN (same weights, same output); median of {repeats} interleaved "
              f"repeats, {torch.get_num_threads()} CPU thread(s). Target: time ratio <= 0.6 at >= 85 % sparsity for one "
              "token. FLOP ratio (nnz) skips each token's own zeros (`ffn_flops`); sparse_ffn skips the union of the "
              "window's active neurons, so a 32-token window keeps more (random weights: little reuse)."]
    table = "\n".join(lines)
    print(table)
    payload = {"rows": rows, "repeats": repeats, "threads": torch.get_num_threads(), "quick": args.quick}
    save("relu_strikes_back_ffn_quick" if args.quick else "relu_strikes_back_ffn", payload, None if args.quick else table)


if __name__ == "__main__":
    main()
