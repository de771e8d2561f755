"""Forward+backward time and memory of each Kernel-InfoNCE kernel vs `common.ssl.info_nce`
(NT-Xent, the same 2N x 2N logit matrix from a matmul), and of the official cdist-based form.

    python benchmarks/kernel_infonce_loss.py [--quick]  -> table + benchmarks/results/kernel_infonce_loss.json

Memory is what autograd saves for backward (bytes of distinct saved tensors), a deterministic
proxy for the loss's peak on CPU.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from common.ssl import info_nce  # noqa: E402
from methods.kernel_infonce import KERNELS, kernel_infonce  # noqa: E402

DIM, TEMPERATURE, GAMMA = 128, 0.5, 0.5


def official_form(z1: torch.Tensor, z2: torch.Tensor, temperature: float, gamma: float = GAMMA) -> torch.Tensor:
    """The official `gamma_loss` computation: exp of -cdist^gamma / tau, row sums minus the diagonal."""
    z1, z2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    out = torch.cat([z1, z2])
    sim = torch.exp(-torch.cdist(out, out).pow(gamma) / temperature)
    neg = torch.clamp(sim.sum(dim=-1) - sim.diag(), min=1e-6)
    pos = torch.exp(-torch.norm(z1 - z2, dim=-1).pow(gamma) / temperature).repeat(2)
    return -torch.log(pos / (neg + 1e-6)).mean()


def saved_bytes(fn) -> int:
    seen = {}

    def pack(t):
        seen[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def fwd_bwd(loss_fn, z1, z2):
    def step():
        a, b = z1.detach().requires_grad_(), z2.detach().requires_grad_()
        loss_fn(a, b).backward()
    return step


def main(quick: bool):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sizes, repeats = ((512, 2048), 2) if quick else ((512, 2048, 8192), 3)
    rows = []
    for size in sizes:
        z1, z2 = torch.randn(size // 2, DIM, device=device), torch.randn(size // 2, DIM, device=device)
        fns = {"info_nce": fwd_bwd(lambda a, b: info_nce(a, b, TEMPERATURE), z1, z2)}
        fns |= {k: fwd_bwd(lambda a, b, k=k: kernel_infonce(a, b, k, TEMPERATURE, GAMMA), z1, z2) for k in KERNELS}
        fns["official_cdist"] = fwd_bwd(lambda a, b: official_form(a, b, TEMPERATURE), z1, z2)
        secs = interleaved(fns, repeats)
        mem = {k: saved_bytes(f) / 2**20 for k, f in fns.items()}
        rows.append({"two_n": size, "seconds": secs, "saved_mb": mem,
                     "ratio_to_info_nce": {k: s / secs["info_nce"] for k, s in secs.items()}})
    names = ["info_nce", *KERNELS, "official_cdist"]
    lines = ["| 2N | " + " | ".join(f"{k} ms (× NT-Xent)" for k in names) + " |", "|---" * (len(names) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r['two_n']} | " + " | ".join(
            f"{1e3 * r['seconds'][k]:.1f} ({r['ratio_to_info_nce'][k]:.2f})" for k in names) + " |")
    lines += ["", "| 2N | " + " | ".join(f"{k} saved MB" for k in names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {r['two_n']} | " + " | ".join(f"{r['saved_mb'][k]:.1f}" for k in names) + " |" for r in rows]
    lines += ["", f"Forward + backward, d = {DIM}, γ = {GAMMA} (official form: exponential kernel), median of "
              f"{repeats} interleaved runs, {torch.get_num_threads()} CPU threads, device {device.type}."]
    table = "\n".join(lines)
    print(table)
    save("kernel_infonce_loss", {"rows": rows, "dim": DIM, "gamma": GAMMA, "repeats": repeats,
                                 "threads": torch.get_num_threads(), "device": device.type}, None if quick else table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, no README update")
    main(parser.parse_args().quick)
