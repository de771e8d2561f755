"""Throughput and peak memory of a ViT with Soft MoE vs the dense ViT at matched FLOPs, as the
number of experts grows, and a naive per-expert Python loop for comparison.

    python benchmarks/soft_moe_scaling.py  -> table + benchmarks/results/soft_moe_scaling.{json,png}

Matched FLOPs: 256 tokens (32x32 image, patch 2) and n·p = 256 slots for every n, so each
MoE layer runs 256 expert-MLP applications per image, as the dense MLP does. Peak memory is
the peak RSS of a fresh subprocess per configuration (CPU) or max_memory_allocated (CUDA).
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


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--one":  # child process: one configuration
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), "cuda" if torch.cuda.is_available() else "cpu")))
        return
    rows = {}
    configs = [("dense", 1)] + [(k, n) for n in EXPERTS for k in ("soft", "loop")]
    for kind, n in configs:
        proc = subprocess.run([sys.executable, __file__, "--one", kind, str(n)], capture_output=True, text=True, check=True)
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
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lines += ["", f"Training throughput on {device}, batch {BATCH}, {TOKENS} tokens (32x32, patch 2), width 128, "
              f"4 blocks with MoE in 2, slots = tokens for every n (matched FLOPs); mean of {STEPS} steps; "
              "peak MB is the process's peak RSS on CPU.", "", "![throughput ratio](../../benchmarks/results/soft_moe_scaling.png)"]
    table = "\n".join(lines)
    print(table)
    plot(rows)
    save("soft_moe_scaling", {"rows": rows, "device": device, "batch": BATCH, "tokens": TOKENS, "steps": STEPS}, table)


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
