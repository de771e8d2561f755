"""Forward+backward time and memory of the poly-view losses: the vectorised (NM) x (NM) form vs a
loop over view pairs (alpha, beta) in the style of the paper's appendix pseudo-code, and the
loss's share of a SmallCNN training step, and a torch.profiler table of the geometric loss at
N x M = 128 x 8 (where its time goes).

    python benchmarks/polyview_loss.py [--quick]  -> table + benchmarks/results/polyview_loss.json

Ratios are of times measured in the same process, interleaved; both the median and the minimum
over the repeats are reported (on a shared machine the minimum is the least disturbed run).

Memory is what autograd saves for backward (bytes of distinct saved tensors), a deterministic
proxy for the loss's peak on CPU; on CUDA the peak allocated memory is reported instead.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common_bench import save, saved_bytes, timed  # noqa: E402
from common.nn.backbones import SmallCNN  # noqa: E402
from methods.polyview import LOSSES, PolyView, poly_view_loss  # noqa: E402

DIM, TEMPERATURE = 64, 0.5


def pair_loop_geometric(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """Geometric PVC as M(M-1) cross-entropies, one per (alpha, beta), over masked (view, sample) logits."""
    n, m, _ = z.shape
    z = F.normalize(z, dim=-1)
    own = torch.eye(n, dtype=torch.bool, device=z.device)[:, None, :].expand(n, m, n)   # (N, M, N)
    targets = torch.arange(n, device=z.device)
    losses = []
    for a in range(m):
        logits = torch.einsum("id,jgd->igj", z[:, a], z) / temperature                 # (N, M, N)
        for b in range(m):
            if b != a:
                mask = own.clone()
                mask[:, b] = False                                                      # keep the target view
                losses.append(F.cross_entropy(logits.masked_fill(mask, float("-inf")).reshape(n, m * n),
                                              targets + b * n))
    return torch.stack(losses).mean()


def fwd_bwd(loss_fn, z):
    def step():
        x = z.detach().requires_grad_()
        loss_fn(x, TEMPERATURE).backward()
    return step


def interleaved_stats(fns: dict, repeats: int) -> tuple[dict, dict]:
    """(median, min) seconds of each callable over `repeats` interleaved calls after one warm-up."""
    for fn in fns.values():
        fn()
    samples = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            samples[k] += timed(fn, 1)
    return ({k: statistics.median(v) for k, v in samples.items()}, {k: min(v) for k, v in samples.items()})


def profile_table(z: torch.Tensor, steps: int = 10) -> str:
    """Self CPU time of the ops of `steps` forward+backward passes of the geometric loss."""
    step = fwd_bwd(lambda x, t: poly_view_loss(x, t, "geometric"), z)
    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    return prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=12,
                                                               max_name_column_width=40, max_shapes_column_width=60)


def main(quick: bool):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    totals, views = ((1024,), (2, 8)) if quick else ((1024, 4096), (2, 4, 8, 16))
    repeats = 2 if quick else 9
    rows = []
    for total in totals:
        for m in views:
            z = torch.randn(total // m, m, DIM, device=device)
            fns = {kind: fwd_bwd(lambda x, t, k=kind: poly_view_loss(x, t, k), z) for kind in LOSSES}
            fns["pair_loop"] = fwd_bwd(pair_loop_geometric, z)
            secs, best = interleaved_stats(fns, repeats if total == 1024 else max(2, repeats // 3))
            mem = {k: saved_bytes(lambda f=f: f()) / 2**20 for k, f in fns.items()}
            rows.append({"encoded_views": total, "views": m, "seconds": secs, "min_seconds": best, "saved_mb": mem,
                         "loop_over_geometric": secs["pair_loop"] / secs["geometric"],
                         "loop_over_geometric_min": best["pair_loop"] / best["geometric"]})
    # the loss's share of a SmallCNN (width 16) step at 256 encoded views, M = 8
    torch.manual_seed(0)
    encoder = SmallCNN(1, 16)
    model = PolyView(encoder, encoder.num_features, views=8, loss="geometric").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images = torch.randint(0, 256, (32, 1, 28, 28), dtype=torch.uint8, device=device)

    def train_step():
        loss, _ = model.training_step(images)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    share, _ = interleaved_stats({"step": train_step, "loss": fwd_bwd(
        lambda x, t: poly_view_loss(x, t, "geometric"), torch.randn(32, 8, 64, device=device))}, repeats)
    profile = profile_table(torch.randn(128, 8, DIM, device=device)) if device.type == "cpu" else ""
    lines = ["| N·M | M | " + " | ".join(f"{k} ms" for k in LOSSES) + " | pair loop ms | loop / geometric "
             "(median) | loop / geometric (min) | geometric saved MB | loop saved MB |", "|---" * (len(LOSSES) + 7) + "|"]
    for r in rows:
        s = r["seconds"]
        lines.append(f"| {r['encoded_views']} | {r['views']} | " + " | ".join(f"{1e3 * s[k]:.1f}" for k in LOSSES)
                     + f" | {1e3 * s['pair_loop']:.1f} | {r['loop_over_geometric']:.2f} | "
                     f"{r['loop_over_geometric_min']:.2f} | "
                     f"{r['saved_mb']['geometric']:.1f} | {r['saved_mb']['pair_loop']:.1f} |")
    lines += ["", f"Loss share of a SmallCNN-w16 step (32 images x 8 views): {share['loss'] / share['step']:.1%} "
              f"({1e3 * share['loss']:.1f} of {1e3 * share['step']:.1f} ms). d = {DIM}; times are medians of "
              f"{repeats} interleaved runs at N·M = 1024 ({max(2, repeats // 3)} at 4096), ratios of medians "
              f"and of minima; {torch.get_num_threads()} CPU threads, device {device.type}."]
    if profile:
        lines += ["", "Profile of the geometric loss, N x M = 128 x 8, d = 64, 10 forward+backward passes "
                  "(self CPU time by op and input shape):", "", "```", profile.strip(), "```"]
    table = "\n".join(lines)
    print(table)
    save("polyview_loss", {"rows": rows, "step_share": share["loss"] / share["step"], "step_seconds": share,
                           "profile": profile, "dim": DIM, "repeats": repeats, "threads": torch.get_num_threads(),
                           "device": device.type}, None if quick else table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, no README update")
    main(parser.parse_args().quick)
