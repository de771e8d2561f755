"""Δ-SGD's local step against an SGD step (issue #41): time, and the memory Δ-SGD adds (the
previous weights' copy and their gradient: 2 x the parameter bytes) over the activations autograd
saves for one step. A Δ-SGD step runs two forward-backward passes on the same batch, a norm of
the weight and gradient differences, a weight copy: expect ≈ 2x the time (target <= 2.2x).

    python benchmarks/delta_sgd_step.py            # CNNMnist (batch 64) and ResNet-18 (CIFAR, batch 16)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common_bench import save, saved_bytes  # noqa: E402
from methods.delta_sgd import CNNMnist, delta_sgd_local  # noqa: E402


def resnet18():
    from torchvision.models import resnet18 as tv_resnet18

    return tv_resnet18(num_classes=10)


PASS = 5   # steps of one local pass (a fm01 client: 300 images, batch 64)


def interleaved_both(fns: dict, repeats: int, warmup: int = 1) -> tuple[dict, dict]:
    """Median wall seconds and median CPU seconds (this process, one thread) of each callable,
    measured in alternation. On a shared machine the wall clock also counts the time other
    processes hold the core; the CPU time does not, so the ratios are read from it."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    wall, cpu = {k: [] for k in fns}, {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - w0)
            cpu[k].append(time.process_time() - c0)
    med = lambda d: {k: statistics.median(v) for k, v in d.items()}   # noqa: E731
    return med(wall), med(cpu)


def row(name: str, make, shape, repeats: int) -> dict:
    torch.manual_seed(0)
    x, y = torch.randn(*shape), torch.randint(0, 10, (shape[0],))
    loss_fn = lambda model, _: F.cross_entropy(model(x), y)   # noqa: E731
    sgd_model, dsgd_model = make(), make()
    opt = torch.optim.SGD(sgd_model.parameters(), lr=0.01)

    def sgd_step():
        opt.zero_grad()
        loss_fn(sgd_model, None).backward()
        opt.step()

    def dsgd_step():   # one step of a fresh client (the copy and both passes included)
        delta_sgd_local(dsgd_model, [None], loss_fn, lr=1e-3)

    def sgd_pass():    # a local pass of PASS steps
        for _ in range(PASS):
            sgd_step()

    def dsgd_pass():
        delta_sgd_local(dsgd_model, [None] * PASS, loss_fn, lr=1e-3)

    w, t = interleaved_both({"sgd": sgd_step, "dsgd": dsgd_step, "sgd_pass": sgd_pass, "dsgd_pass": dsgd_pass}, repeats)
    param_bytes = sum(p.numel() * p.element_size() for p in sgd_model.parameters())
    act = saved_bytes(lambda: loss_fn(sgd_model, None))
    return {"model": name, "batch": shape[0], "sgd_s": t["sgd"], "dsgd_s": t["dsgd"], "ratio": t["dsgd"] / t["sgd"],
            "pass_steps": PASS, "sgd_pass_s": t["sgd_pass"], "dsgd_pass_s": t["dsgd_pass"],
            "pass_ratio": t["dsgd_pass"] / t["sgd_pass"], "clock": "cpu (process_time)",
            "wall_sgd_s": w["sgd"], "wall_dsgd_s": w["dsgd"], "wall_ratio": w["dsgd"] / w["sgd"],
            "wall_pass_ratio": w["dsgd_pass"] / w["sgd_pass"],
            "param_mb": param_bytes / 2**20, "activation_mb": act / 2**20,
            "extra_mb": 2 * param_bytes / 2**20, "memory_ratio": (act + 4 * param_bytes) / (act + 2 * param_bytes)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [row("CNNMnist", CNNMnist, (64, 1, 28, 28), args.repeats),
            row("ResNet-18", resnet18, (16, 3, 32, 32), max(2, args.repeats // 2))]
    lines = ["| model | batch | SGD step (CPU s) | Δ-SGD first step (CPU s) | × SGD | 5-step pass × SGD | pass × SGD (wall) "
             "| params (MB) | saved activations (MB) | Δ-SGD extra (MB) | memory × SGD |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['sgd_s']:.4f} | {r['dsgd_s']:.4f} | {r['ratio']:.2f} | "
                     f"{r['pass_ratio']:.2f} | {r['wall_pass_ratio']:.2f} | {r['param_mb']:.2f} | {r['activation_mb']:.2f} | {r['extra_mb']:.2f} | {r['memory_ratio']:.2f} |")
    lines += ["", f"One CPU thread, median of {args.repeats} interleaved repeats ({max(2, args.repeats // 2)} "
              "for ResNet-18), timed in CPU time of this process (the wall clock of a shared machine also counts other "
              "processes; its pass ratio is the wall column). Δ-SGD's first step is a fresh "
              "client's (deep copy of the weights, two forward-backward passes, the two difference norms: float32 per "
              "tensor, squares summed in float64); the pass is a "
              "fresh client's 5 steps against 5 SGD steps; memory: "
              "weights + gradients (+ the copy and its gradient for Δ-SGD) + the activations autograd saves."]
    table = "\n".join(lines)
    print(table)
    save("delta_sgd_step", {"rows": rows, "repeats": args.repeats}, table)


if __name__ == "__main__":
    main()
