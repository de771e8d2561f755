"""What Least Volume costs: training-step time and peak memory of the LV autoencoder (spectrally
normalised decoder + volume penalty) vs the unconstrained one (same layers, λ = 0, no
normalisation), and explained_reconstruction with all m pruned copies decoded in batches vs the
official per-dimension loop.

    python benchmarks/least_volume_cost.py [--quick]  -> table + benchmarks/results/least_volume_cost.json

Step times are medians of interleaved steps in one process; peak memory is the tensor memory at
the peak of one step (the profiler's memory timeline on CPU, max_memory_allocated on CUDA).
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from methods.least_volume import ConvLeastVolumeAE, LeastVolumeAE, explained_reconstruction, l2_loss  # noqa: E402
from methods.least_volume.loss import bce_reconstruction, least_volume_loss, volume_penalty  # noqa: E402

NETS = {  # name -> (builder(lipschitz), input shape without batch, batch)
    "mlp_digits": (lambda lip: LeastVolumeAE(64, 32, hidden=(128, 128), lipschitz=lip), (64,), 128),
    "conv_mnist32": (lambda lip: ConvLeastVolumeAE(1, 128, 32, lipschitz=lip), (1, 32, 32), 100),
}


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def train_step(net: str, lv: bool, batch: int):
    torch.manual_seed(0)
    build, shape, _ = NETS[net]
    model = build(lv).to(device())
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.99))
    x = torch.rand(batch, *shape, device=device())

    def step():
        x_hat, z = model(x)
        loss = least_volume_loss(x_hat, x, z, 1e-2 if lv else 0.0, volume_penalty, bce_reconstruction)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device() == "cuda":
            torch.cuda.synchronize()
    return step


def peak_memory(step) -> float:
    """MB of tensor memory at the peak of one training step (after a warm-up step, so Adam's state
    exists): max_memory_allocated on CUDA; on CPU the profiler's memory timeline (parameters,
    gradients, optimiser state, activations, temporaries), which RSS is too coarse to show."""
    step()
    if device() == "cuda":
        torch.cuda.reset_peak_memory_stats()
        step()
        return torch.cuda.max_memory_allocated() / 2**20
    import tempfile
    import warnings

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        path = Path(tmp) / "timeline.raw.json"
        prof.export_memory_timeline(str(path), device="cpu")
        _, sizes = json.loads(path.read_text())
    return max(sum(row) for row in sizes) / 2**20


@torch.no_grad()
def official_explained_reconstruction(encode, decode, x, loss_fn):
    """src/model/utils/metrics.py: one decode per latent dimension."""
    z = encode(x)
    eps = loss_fn(decode(z), x)
    z_mean = z.mean(0)
    denom = loss_fn(decode(z_mean.unsqueeze(0)).expand(len(x), *x.shape[1:]), x)
    loss = torch.empty_like(z_mean)
    for i in range(z.size(-1)):
        z_p = z.clone()
        z_p[:, i] = z_mean[i]
        loss[i] = loss_fn(decode(z_p), x)
    return (loss - eps).clip(0, None) / (denom - eps)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small batches and few repeats (checks that it runs)")
    args = parser.parse_args()
    repeats = 3 if args.quick else 15
    rows = {}
    for net, (_, _, batch) in NETS.items():
        batch = min(batch, 16) if args.quick else batch
        t = interleaved({"ae": train_step(net, False, batch), "lv": train_step(net, True, batch)}, repeats)
        mem = {kind: peak_memory(train_step(net, lv, batch)) for kind, lv in (("ae", False), ("lv", True))}
        rows[net] = {"batch": batch, "ae_s": t["ae"], "lv_s": t["lv"], "time_ratio": t["lv"] / t["ae"],
                     "ae_peak_mb": mem["ae"], "lv_peak_mb": mem["lv"], "memory_ratio": mem["lv"] / mem["ae"]}
    pruning = {}
    for net, n in (("mlp_digits", 360), ("conv_mnist32", 16 if args.quick else 100)):
        torch.manual_seed(0)
        build, shape, _ = NETS[net]
        model = build(True).to(device()).eval()
        x = torch.rand(n, *shape, device=device())
        fns = {"loop": lambda: official_explained_reconstruction(model.encode, model.decode, x, l2_loss),
               "batched": lambda: explained_reconstruction(model.encode, model.decode, x, l2_loss, chunk=None)}
        torch.testing.assert_close(fns["loop"](), fns["batched"](), rtol=1e-4, atol=1e-5, equal_nan=True)
        t = interleaved(fns, 1 if args.quick else 5)
        pruning[net] = {"images": n, "loop_s": t["loop"], "batched_s": t["batched"], "speedup": t["loop"] / t["batched"]}
    lines = ["| net | batch | AE s/step | LV s/step | LV / AE | AE peak MB | LV peak MB | LV / AE |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {k} | {r['batch']} | {r['ae_s']:.4f} | {r['lv_s']:.4f} | {r['time_ratio']:.2f} | "
              f"{r['ae_peak_mb']:.1f} | {r['lv_peak_mb']:.1f} | {r['memory_ratio']:.2f} |" for k, r in rows.items()]
    lines += ["", "| net | images | per-dimension loop (s) | batched (s) | speed-up |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {r['images']} | {r['loop_s']:.3f} | {r['batched_s']:.3f} | {r['speedup']:.1f} |"
              for k, r in pruning.items()]
    lines += ["", f"{device()}, {torch.get_num_threads()} threads; LV = spectrally normalised decoder (power "
              f"iteration each step) + volume penalty; AE = the same layers unnormalised, λ = 0. Median of "
              f"{repeats} interleaved steps; peak tensor memory of one step."]
    table = "\n".join(lines)
    print(table)
    save("least_volume_cost", {"steps": rows, "explained_reconstruction": pruning, "device": device(),
                               "threads": torch.get_num_threads(), "quick": args.quick, "time": time.time()}, table)


if __name__ == "__main__":
    main()
