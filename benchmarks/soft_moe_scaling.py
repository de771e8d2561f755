"""Throughput and peak memory of a ViT with Soft MoE vs the dense ViT at matched FLOPs, as the
number of experts grows, and a naive per-expert Python loop for comparison; then our Soft MoE
layer beside the PyTorch peer implementation `soft-moe-pytorch` (lucidrains), same shapes.

    python benchmarks/soft_moe_scaling.py [--quick | --peer-only]  -> tables + benchmarks/results/soft_moe_scaling.{json,png}
    python benchmarks/soft_moe_scaling.py --peer-threads  -> benchmarks/results/soft_moe_peer_threads.json

--peer-threads: the peer comparison at one and at two threads (4-256 experts, 256 tokens so that
n·p = tokens for every n), forward and backward timed apart, wall clock (two threads), with the
machine's load average before and after in the JSON (a shared machine: ratios, not milliseconds).

Matched FLOPs: 256 tokens (32x32 image, patch 2) and n·p = 256 slots for every n, so each
MoE layer runs 256 expert-MLP applications per image, as the dense MLP does. Peak memory is
the peak RSS of a fresh subprocess per configuration (CPU) or max_memory_allocated (CUDA).
The peer comparison times forward + backward of one layer (B = 16, 196 tokens, d = 192,
n·p = 196 slots) for both implementations in one process, interleaved (median of repeats).
"""
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from einops import rearrange  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from benchmarks.common_bench import OUT, save  # noqa: E402
from methods.soft_moe import MoEViT, SoftMoE  # noqa: E402

EXPERTS = (1, 4, 16, 64, 256)
TOKENS, BATCH, STEPS = 256, 32, 5
PEER_EXPERTS, PEER_SHAPE, PEER_REPEATS = (1, 4, 14, 49, 196), (16, 196, 192), 5   # (B, m, d); n·p = m


def vit_kwargs(router: str, experts: int) -> dict:
    return dict(router=router, patch_size=2, dim=128, depth=4, heads=4, mlp_ratio=4.0, moe_blocks=2,
                num_experts=experts, slots_per_expert=TOKENS // experts, expert_mlp_ratio=4.0,
                capacity_factor=1.0, aux_weight=0.0)


class LoopExperts(torch.nn.Module):
    """The naive way: one Python-level matmul pair per expert."""

    def __init__(self, experts):
        super().__init__()
        self.e = experts

    def forward(self, x):  # (B, n, p, d)
        outs = []
        for k in range(x.shape[1]):
            h = torch.nn.functional.gelu(x[:, k] @ self.e.w1[k] + self.e.b1[k])
            outs.append(h @ self.e.w2[k] + self.e.b2[k])
        return torch.stack(outs, dim=1)


def build(kind: str, experts: int):
    model = MoEViT(32, 3, 10, **vit_kwargs("dense" if kind == "dense" else "soft", experts))
    if kind == "loop":
        for layer in model.moe_layers():
            if isinstance(layer, SoftMoE):
                layer.experts = LoopExperts(layer.experts)
    return model


def measure(kind: str, experts: int, device: str) -> dict:
    torch.manual_seed(0)
    model = build(kind, experts).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 256, (BATCH, 3, 32, 32), dtype=torch.uint8, device=device)
    y = torch.randint(0, 10, (BATCH,), device=device)

    def step():
        loss, _ = model.training_step((x, y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / STEPS
    out = {"images_per_s": BATCH / seconds, "params_m": sum(p.numel() for p in model.parameters()) / 1e6}
    if device == "cuda":
        out["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    else:
        import resource
        out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def peer_rows(experts, shape, repeats: int, device: str) -> dict:
    """Forward + backward seconds of our SoftMoE and soft_moe_pytorch.SoftMoE at the same shapes."""
    from soft_moe_pytorch import SoftMoE as PeerSoftMoE

    from benchmarks.common_bench import interleaved

    b, m, d = shape
    rows = {}
    for n in experts:
        torch.manual_seed(0)
        ours = SoftMoE(d, n, m // n, 4 * d).to(device)
        peer = PeerSoftMoE(d, num_experts=n, num_slots=m // n, expert_mult=4,
                           offload_unused_experts_to_cpu=False).to(device)
        x = torch.randn(b, m, d, device=device, requires_grad=True)

        def fwd_bwd(layer):
            def go():
                layer(x).sum().backward()
                if device == "cuda":
                    torch.cuda.synchronize()
            return go
        secs = interleaved({"ours": fwd_bwd(ours), "peer": fwd_bwd(peer)}, repeats)
        rows[f"peer_{n}"] = {"experts": n, "slots_per_expert": m // n, "ours_ms": 1e3 * secs["ours"],
                             "peer_ms": 1e3 * secs["peer"], "peer_over_ours": secs["peer"] / secs["ours"]}
    return rows


def peer_table(rows: dict, shape, device: str) -> list[str]:
    b, m, d = shape
    lines = ["| experts × slots | ours fwd+bwd (ms) | soft-moe-pytorch (ms) | peer / ours |", "|---|---|---|---|"]
    for r in rows.values():
        lines.append(f"| {r['experts']} × {r['slots_per_expert']} | {r['ours_ms']:.1f} | {r['peer_ms']:.1f} | "
                     f"{r['peer_over_ours']:.2f} |")
    from importlib.metadata import version

    return lines + ["", f"One Soft MoE layer on {device} ({torch.get_num_threads()} thread(s)), B = {b}, {m} tokens, d = {d}, n·p = {m} slots, "
                        f"forward + backward, median of interleaved repeats; soft-moe-pytorch {version('soft-moe-pytorch')} "
                        "loops over experts in Python (and normalises tokens and slots with RMSNorm)."]


PT_EXPERTS, PT_SHAPE, PT_REPEATS = (4, 16, 64, 256), (8, 256, 192), 5   # (B, m, d); n·p = m


def peer_threads(experts=PT_EXPERTS, shape=PT_SHAPE, repeats=PT_REPEATS, threads=(1, 2)) -> dict:
    """Forward and backward seconds (medians of interleaved repeats, wall clock) of ours and the
    peer at each thread count; ratios peer / ours per phase."""
    import os
    import statistics

    from soft_moe_pytorch import SoftMoE as PeerSoftMoE

    b, m, d = shape
    out = {"load_before": os.getloadavg(), "shape": shape, "repeats": repeats, "rows": {}}
    for n in experts:
        torch.manual_seed(0)
        layers = {"ours": SoftMoE(d, n, m // n, 4 * d),
                  "peer": PeerSoftMoE(d, num_experts=n, num_slots=m // n, expert_mult=4,
                                      offload_unused_experts_to_cpu=False)}
        x = torch.randn(b, m, d, requires_grad=True)
        for t in threads:
            torch.set_num_threads(t)
            times = {k: ([], []) for k in layers}
            for rep in range(repeats + 1):          # round 0 warms up
                for k, layer in layers.items():
                    t0 = time.perf_counter()
                    y = layer(x)
                    t1 = time.perf_counter()
                    y.sum().backward()
                    t2 = time.perf_counter()
                    x.grad = None
                    layer.zero_grad(set_to_none=True)
                    if rep:
                        times[k][0].append(t1 - t0)
                        times[k][1].append(t2 - t1)
            med = {k: (statistics.median(f), statistics.median(bw)) for k, (f, bw) in times.items()}
            out["rows"][f"{n}_{t}"] = {
                "experts": n, "slots_per_expert": m // n, "threads": t,
                "ours_fwd_ms": 1e3 * med["ours"][0], "ours_bwd_ms": 1e3 * med["ours"][1],
                "peer_fwd_ms": 1e3 * med["peer"][0], "peer_bwd_ms": 1e3 * med["peer"][1],
                "peer_over_ours_fwd": med["peer"][0] / med["ours"][0],
                "peer_over_ours_bwd": med["peer"][1] / med["ours"][1],
                "peer_over_ours": sum(med["peer"]) / sum(med["ours"])}
    out["load_after"] = os.getloadavg()
    return out


def peer_threads_table(res: dict) -> str:
    from importlib.metadata import version

    b, m, d = res["shape"]
    lines = ["| experts × slots | threads | ours fwd / bwd (ms) | peer fwd / bwd (ms) | peer / ours fwd | bwd | fwd+bwd |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"].values():
        lines.append(f"| {r['experts']} × {r['slots_per_expert']} | {r['threads']} | {r['ours_fwd_ms']:.1f} / "
                     f"{r['ours_bwd_ms']:.1f} | {r['peer_fwd_ms']:.1f} / {r['peer_bwd_ms']:.1f} | "
                     f"{r['peer_over_ours_fwd']:.2f} | {r['peer_over_ours_bwd']:.2f} | {r['peer_over_ours']:.2f} |")
    lb, la = res["load_before"], res["load_after"]
    lines += ["", f"One Soft MoE layer on CPU, B = {b}, {m} tokens, d = {d}, n·p = {m} slots; wall clock, medians of "
              f"{res['repeats']} interleaved repeats; soft-moe-pytorch {version('soft-moe-pytorch')}; load average "
              f"(1/5/15 min) {lb[0]:.1f}/{lb[1]:.1f}/{lb[2]:.1f} before and {la[0]:.1f}/{la[1]:.1f}/{la[2]:.1f} after, "
              "on 2 cores.",
              "", "(`python benchmarks/soft_moe_scaling.py --peer-threads`; raw: "
              "`benchmarks/results/soft_moe_peer_threads.json`)"]
    return "\n".join(lines)


def main():
    if "--peer-threads" in sys.argv[1:]:
        from common import results
        quick = "--quick" in sys.argv[1:]
        res = peer_threads((4, 16), (2, 16, 32), 1) if quick else peer_threads()
        table = peer_threads_table(res)
        print(table)
        if not quick:
            results.write(OUT / "soft_moe_peer_threads.json", res)
            results.update_readmes("bench:soft_moe_peer_threads", table)
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--one":  # child process: one configuration
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), "cuda" if torch.cuda.is_available() else "cpu")))
        return
    quick = "--quick" in sys.argv[1:]   # a check that the script runs: small sizes, nothing written
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if quick:
        torch.set_num_threads(1)
        rows = peer_rows((1, 4), (2, 16, 32), 2, device)
        print("\n".join(peer_table(rows, (2, 16, 32), device)))
        return
    configs = [("dense", 1)] + [(k, n) for n in EXPERTS for k in ("soft", "loop")]
    if "--peer-only" in sys.argv[1:]:   # re-measure the peer comparison; keep the recorded scaling rows
        recorded = json.loads((OUT / "soft_moe_scaling.json").read_text())
        rows, measured = recorded["rows"], recorded["provenance"]["time"][:10]
    else:
        rows, measured = {}, None
        for kind, n in configs:
            proc = subprocess.run([sys.executable, __file__, "--one", kind, str(n)], capture_output=True, text=True,
                                  check=True)
            rows[f"{kind}_{n}"] = json.loads(proc.stdout.strip().splitlines()[-1])
    dense = rows["dense_1"]
    lines = ["| model | experts | params (M) | images/s | vs dense | peak MB | vs dense |", "|---|---|---|---|---|---|---|",
             f"| dense ViT | - | {dense['params_m']:.2f} | {dense['images_per_s']:.1f} | 1.00 | {dense['peak_mb']:.0f} | 1.00 |"]
    for kind, n in configs[1:]:
        r = rows[f"{kind}_{n}"]
        r["throughput_ratio"] = r["images_per_s"] / dense["images_per_s"]
        r["memory_ratio"] = r["peak_mb"] / dense["peak_mb"]
        name = "Soft MoE (einsum)" if kind == "soft" else "Soft MoE (loop over experts)"
        lines.append(f"| {name} | {n} | {r['params_m']:.2f} | {r['images_per_s']:.1f} | {r['throughput_ratio']:.2f} | "
                     f"{r['peak_mb']:.0f} | {r['memory_ratio']:.2f} |")
    lines += ["", f"Training throughput on {device}, batch {BATCH}, {TOKENS} tokens (32x32, patch 2), width 128, "
              f"4 blocks with MoE in 2, slots = tokens for every n (matched FLOPs); mean of {STEPS} steps; "
              "peak MB is the process's peak RSS on CPU" + (f" (measured {measured})." if measured else "."),
              "", "![throughput ratio](../../benchmarks/results/soft_moe_scaling.png)"]
    peers = peer_rows(PEER_EXPERTS, PEER_SHAPE, PEER_REPEATS, device)
    lines += ["", *peer_table(peers, PEER_SHAPE, device)]
    table = "\n".join(lines)
    print(table)
    plot(rows)
    save("soft_moe_scaling", {"rows": rows, "peer": peers, "device": device, "batch": BATCH, "tokens": TOKENS,
                              "steps": STEPS, "peer_shape": PEER_SHAPE, "peer_repeats": PEER_REPEATS,
                              "scaling_measured": measured or "this run"}, table)


def plot(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for kind, label in (("soft", "Soft MoE (einsum)"), ("loop", "Soft MoE (loop over experts)")):
        ax.plot(EXPERTS, [rows[f"{kind}_{n}"]["throughput_ratio"] for n in EXPERTS], "o-", label=label)
    ax.axhline(1.0, color="grey", ls="--", label="dense ViT")
    ax.set_xscale("log", base=2), ax.set_xlabel("experts (slots = tokens = 256)")
    ax.set_ylabel("training throughput / dense"), ax.legend(), fig.tight_layout()
    fig.savefig(OUT / "soft_moe_scaling.png", dpi=120)


if __name__ == "__main__":
    main()
