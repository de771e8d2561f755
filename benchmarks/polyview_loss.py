"""Forward+backward time and memory of the poly-view losses: the vectorised (NM) x (NM) form vs a
loop over view pairs (alpha, beta) in the style of the paper's appendix pseudo-code, and the
loss's share of a SmallCNN training step, and a torch.profiler table of the geometric loss at
N x M = 128 x 8 (where its time goes).

    python benchmarks/polyview_loss.py [--quick]  -> table + benchmarks/results/polyview_loss.json

Ratios are of times measured in the same process, interleaved: medians of this thread's CPU time
(on a shared machine the wall clock also counts the time other processes hold the core), with the
wall-clock ratio beside them; and a breakdown of the geometric loss into the GEMMs it shares with
the loop, which bound the ratio any such form can reach.

Memory is what autograd saves for backward (bytes of distinct saved tensors), a deterministic
proxy for the loss's peak on CPU; on CUDA the peak allocated memory is reported instead.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common_bench import save, saved_bytes  # noqa: E402
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
    """(wall, cpu): median seconds of each callable over `repeats` interleaved calls after one
    warm-up, by the wall clock and by this thread's CPU time (which leaves out the time other
    processes hold the core: on a shared machine the fair measure of work done at one thread)."""
    for fn in fns.values():
        fn()
    wall, cpu = {k: [] for k in fns}, {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.thread_time() - c0)
    return ({k: statistics.median(v) for k, v in wall.items()}, {k: statistics.median(v) for k, v in cpu.items()})


def breakdown(n: int, m: int, repeats: int) -> dict[str, float]:
    """Median CPU ms of the geometric loss's parts at N x M, d = DIM: the GEMMs it shares with the
    pair loop (logits x x^T, and the two products of backward), its one exp pass, the whole loss
    and the whole loop. Bound: loop / GEMMs is the most any form that computes these GEMMs can gain."""
    x = F.normalize(torch.randn(n * m, DIM), dim=-1)
    e = torch.mm(x, x.T).exp()
    z = torch.randn(n, m, DIM)
    parts = {"gemm_logits": lambda: torch.mm(x * 2.0, x.T), "gemm_backward_Ex": lambda: torch.mm(e, x),
             "gemm_backward_ETx": lambda: torch.mm(e.T, x), "exp_pass": lambda: e.exp(),
             "geometric_fwd_bwd": fwd_bwd(lambda y, t: poly_view_loss(y, t, "geometric"), z),
             "pair_loop_fwd_bwd": fwd_bwd(pair_loop_geometric, z)}
    _, cpu = interleaved_stats(parts, repeats)
    out = {k: 1e3 * v for k, v in cpu.items()}
    out["gemms"] = out["gemm_logits"] + out["gemm_backward_Ex"] + out["gemm_backward_ETx"]
    out["bound_loop_over_gemms"] = out["pair_loop_fwd_bwd"] / out["gemms"]
    return out


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
            wall, secs = interleaved_stats(fns, repeats if total == 1024 else max(3, repeats // 3))
            mem = {k: saved_bytes(lambda f=f: f()) / 2**20 for k, f in fns.items()}
            rows.append({"encoded_views": total, "views": m, "seconds": secs, "wall_seconds": wall, "saved_mb": mem,
                         "loop_over_geometric": secs["pair_loop"] / secs["geometric"],
                         "loop_over_geometric_wall": wall["pair_loop"] / wall["geometric"]})
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
    _, share = interleaved_stats({"step": train_step, "loss": fwd_bwd(
        lambda x, t: poly_view_loss(x, t, "geometric"), torch.randn(32, 8, 64, device=device))}, repeats)
    cpu_only = device.type == "cpu"
    profile = profile_table(torch.randn(128, 8, DIM, device=device)) if cpu_only else ""
    parts = breakdown(128, 8, 3 * repeats) if cpu_only else {}
    lines = ["| N·M | M | " + " | ".join(f"{k} ms" for k in LOSSES) + " | pair loop ms | loop / geometric "
             "(CPU time) | loop / geometric (wall) | geometric saved MB | loop saved MB |",
             "|---" * (len(LOSSES) + 7) + "|"]
    for r in rows:
        s = r["seconds"]
        lines.append(f"| {r['encoded_views']} | {r['views']} | " + " | ".join(f"{1e3 * s[k]:.1f}" for k in LOSSES)
                     + f" | {1e3 * s['pair_loop']:.1f} | {r['loop_over_geometric']:.2f} | "
                     f"{r['loop_over_geometric_wall']:.2f} | "
                     f"{r['saved_mb']['geometric']:.1f} | {r['saved_mb']['pair_loop']:.1f} |")
    lines += ["", f"Loss share of a SmallCNN-w16 step (32 images x 8 views): {share['loss'] / share['step']:.1%} "
              f"({1e3 * share['loss']:.1f} of {1e3 * share['step']:.1f} ms). d = {DIM}; times are medians of "
              f"{repeats} interleaved forward+backward runs at N·M = 1024 ({max(3, repeats // 3)} at 4096) in "
              f"this thread's CPU time (the wall-clock ratio beside it); {torch.get_num_threads()} CPU threads, "
              f"device {device.type}."]
    if parts:
        lines += ["", f"Where the time goes, N x M = 128 x 8 (median CPU ms of {3 * repeats}): the geometric loss "
                  f"{parts['geometric_fwd_bwd']:.2f}, of which the three GEMMs it shares with the pair loop "
                  f"{parts['gemms']:.2f} (logits x x^T {parts['gemm_logits']:.2f}, backward E x "
                  f"{parts['gemm_backward_Ex']:.2f} and E^T x {parts['gemm_backward_ETx']:.2f}) and one exp pass "
                  f"{parts['exp_pass']:.2f}; the pair loop {parts['pair_loop_fwd_bwd']:.2f}. Any form that computes "
                  f"these GEMMs gains at most loop / GEMMs = {parts['bound_loop_over_gemms']:.2f}x here."]
    if profile:
        lines += ["", "Profile of the geometric loss, N x M = 128 x 8, d = 64, 10 forward+backward passes "
                  "(self CPU time by op and input shape):", "", "```", profile.strip(), "```"]
    table = "\n".join(lines)
    print(table)
    save("polyview_loss", {"rows": rows, "step_share": share["loss"] / share["step"], "step_seconds": share,
                           "breakdown_ms": parts, "profile": profile, "timer": "thread CPU time (median)", "dim": DIM, "repeats": repeats, "threads": torch.get_num_threads(),
                           "device": device.type}, None if quick else table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, no README update")
    main(parser.parse_args().quick)
