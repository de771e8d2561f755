"""Inference throughput of EViT/METR token reduction (exits off: the deployed network) at
rho in {1, 0.7, 0.5, 0.3}, batch 256, as a ratio to rho = 1 measured in the same process, beside the
ratio of FLOPs from token_counts (what the reduction should buy). Target: speed-up >= 0.8 x the FLOPs
speed-up (issue 50). Rates alternate within each round; medians of per-round ratios.

    python benchmarks/metr_throughput.py                 # the mini model on CPU (CPU seconds, one thread)
    python benchmarks/metr_throughput.py --model deit_s --device cuda               # DeiT-S at 224, batch 256 (a GPU)
    python benchmarks/metr_throughput.py --model deit_s --batch 32 --rounds 3       # its CPU stand-in (one thread)
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.common_bench import save  # noqa: E402
from common.nn.token_reduction import forward_reduced, token_counts  # noqa: E402
from methods.metr import METRViT  # noqa: E402

MODELS = {"mini": dict(img_size=56, in_chans=1, num_classes=10, patch_size=8, dim=64, depth=6, heads=4,
                       exit_blocks=(1, 2, 3), drop_blocks=(1, 2, 3)),
          "deit_s": dict(img_size=224, in_chans=3, num_classes=1000, patch_size=16, dim=384, depth=12, heads=6,
                         exit_blocks=(3, 6, 9), drop_blocks=(3, 6, 9))}
RATES = (1.0, 0.7, 0.5, 0.3)


def flops(spec: dict, rate: float) -> float:
    """Multiply-adds of the blocks and the patch embedding: a block with n tokens in and n' out
    costs 4 n d^2 + 2 n^2 d (qkv, proj, scores, values) + 2 r n' d^2 (MLP)."""
    d, p = spec["dim"], spec["patch_size"]
    patches = (spec["img_size"] // p) ** 2
    rates = [rate if b in spec["drop_blocks"] else 1.0 for b in range(spec["depth"])]
    out = token_counts(patches, rates, fuse=True)
    total, n_in = patches * spec["in_chans"] * p * p * d, patches + 1
    for n_out in out:
        total += 4 * n_in * d * d + 2 * n_in * n_in * d + 2 * 4.0 * (n_out + 1) * d * d
        n_in = n_out + 1
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="mini")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)
    spec = MODELS[args.model]
    model = METRViT(**spec).to(args.device).eval()
    images = torch.rand(args.batch, spec["in_chans"], spec["img_size"], spec["img_size"], device=args.device)
    cuda = args.device.startswith("cuda")
    clock = time.perf_counter if cuda else time.process_time

    def once(rate):
        if cuda:
            torch.cuda.synchronize()
        t0 = clock()
        with torch.no_grad():
            forward_reduced(model.vit, images * 2 - 1, model.keep_rates(rate), fuse=model.fuse)
        if cuda:
            torch.cuda.synchronize()
        return clock() - t0

    for r in RATES:
        once(r)
    ratios = {r: [] for r in RATES}
    secs = {r: [] for r in RATES}
    for _ in range(args.rounds):
        t = {r: once(r) for r in RATES}
        for r in RATES:
            ratios[r].append(t[1.0] / t[r])
            secs[r].append(t[r])
    base_flops = flops(spec, 1.0)
    rows, payload = [], {"model": args.model, "device": args.device, "batch": args.batch, "rates": {}}
    lines = ["| rho | images/s | speed-up vs rho = 1 | FLOPs speed-up | speed-up / FLOPs speed-up |",
             "|---|---|---|---|---|"]
    for r in RATES:
        speed = statistics.median(ratios[r])
        fl = base_flops / flops(spec, r)
        ips = args.batch / statistics.median(secs[r])
        payload["rates"][str(r)] = {"images_per_s": ips, "speedup": speed, "flops_speedup": fl,
                                    "efficiency": speed / fl}
        lines.append(f"| {r:g} | {ips:.0f} | {speed:.2f} | {fl:.2f} | {speed / fl:.2f} |")
        rows.append((r, speed, fl))
    table = (f"{args.model} on {args.device} (batch {args.batch}, exits off, "
             f"{'wall' if cuda else 'CPU'} seconds, medians of {args.rounds} rounds):\n\n" + "\n".join(lines))
    print(table)
    # the mini model's record keeps its name; DeiT-S is recorded per device kind (cpu: a stand-in
    # measured where no GPU is lent, at a small batch; cuda: the setting)
    name = "metr_throughput_mini" if args.model == "mini" else f"metr_throughput_{args.model}_{args.device.split(':')[0]}"
    save(name, payload, table)


if __name__ == "__main__":
    main()
