"""Forward+backward time and memory of the poly-view losses: the vectorised (NM) x (NM) form vs a
loop over view pairs (alpha, beta) in the style of the paper's appendix pseudo-code, and the
loss's share of a SmallCNN training step.

    python benchmarks/polyview_loss.py [--quick]  -> table + benchmarks/results/polyview_loss.json

Memory is what autograd saves for backward (bytes of distinct saved tensors), a deterministic
proxy for the loss's peak on CPU; on CUDA the peak allocated memory is reported instead.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
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


def saved_bytes(fn) -> int:
    """Bytes of the distinct tensors autograd saves for backward while fn() runs."""
    seen = {}

    def pack(t):
        seen[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def fwd_bwd(loss_fn, z):
    def step():
        x = z.detach().requires_grad_()
        loss_fn(x, TEMPERATURE).backward()
    return step


def main(quick: bool):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    totals, views = ((1024,), (2, 8)) if quick else ((1024, 4096), (2, 4, 8, 16))
    repeats = 2 if quick else 5
    rows = []
    for total in totals:
        for m in views:
            z = torch.randn(total // m, m, DIM, device=device)
            fns = {kind: fwd_bwd(lambda x, t, k=kind: poly_view_loss(x, t, k), z) for kind in LOSSES}
            fns["pair_loop"] = fwd_bwd(pair_loop_geometric, z)
            secs = interleaved(fns, repeats)
            mem = {k: saved_bytes(lambda f=f: f()) / 2**20 for k, f in fns.items()}
            rows.append({"encoded_views": total, "views": m, "seconds": secs, "saved_mb": mem,
                         "loop_over_geometric": secs["pair_loop"] / secs["geometric"]})
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
    share = interleaved({"step": train_step, "loss": fwd_bwd(
        lambda x, t: poly_view_loss(x, t, "geometric"), torch.randn(32, 8, 64, device=device))}, repeats)
    lines = ["| N·M | M | " + " | ".join(f"{k} ms" for k in LOSSES) + " | pair loop ms | loop / geometric "
             "| geometric saved MB | loop saved MB |", "|---" * (len(LOSSES) + 6) + "|"]
    for r in rows:
        s = r["seconds"]
        lines.append(f"| {r['encoded_views']} | {r['views']} | " + " | ".join(f"{1e3 * s[k]:.1f}" for k in LOSSES)
                     + f" | {1e3 * s['pair_loop']:.1f} | {r['loop_over_geometric']:.2f} | "
                     f"{r['saved_mb']['geometric']:.1f} | {r['saved_mb']['pair_loop']:.1f} |")
    lines += ["", f"Loss share of a SmallCNN-w16 step (32 images x 8 views): {share['loss'] / share['step']:.1%} "
              f"({1e3 * share['loss']:.1f} of {1e3 * share['step']:.1f} ms). d = {DIM}, median of {repeats} "
              f"interleaved runs, {torch.get_num_threads()} CPU threads, device {device.type}."]
    table = "\n".join(lines)
    print(table)
    save("polyview_loss", {"rows": rows, "step_share": share["loss"] / share["step"], "step_seconds": share,
                           "dim": DIM, "repeats": repeats, "threads": torch.get_num_threads(),
                           "device": device.type}, None if quick else table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, no README update")
    main(parser.parse_args().quick)
