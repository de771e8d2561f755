"""common/kernels on CUDA at the papers' shapes: reference vs Triton, forward+backward time and
peak memory as ratios measured in the same process, plus each segment op against the HBM
bandwidth bound (bytes it must move / peak bandwidth).

    python benchmarks/gpu_kernels.py [--quick] [--only periodic_attention ...]
        -> table + benchmarks/results/gpu_kernels.json   (without CUDA: says so, exits 0)
    python benchmarks/gpu_kernels.py --cpu-smoke   tiny shapes on the CPU under TRITON_INTERPRET=1:
        checks that the script runs; its numbers mean nothing and it writes nothing by default

Shapes: Crystalformer 64 atoms x batch 64 x 8 heads (d = 16 per head, 64 radial basis functions,
images within the method's reach 3.5 sigma_max = 6.9 A of random cells at 12-25 A^3 per atom);
Soft MoE S/16 (196 tokens, d = 384, 128 experts x 1 slot, h = 1536, batch 128); VCAS ViT-B
linear layers (batch 64 x 197 tokens, nu = 0.5 kept rows). The goals (common/kernels/README.md)
are judged on the paper-shape rows.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HBM_BYTES_PER_S = 4.8e12        # H200 peak HBM3e bandwidth
GOALS = {"periodic_attention": {"speedup": 3.0, "memory_ratio": 4.0}, "segment": {"bound_ratio": 2.0},
         "soft_moe": {"speedup": 1.5}}


class Bench:
    """Times (median of repeats) and peak memory of step functions on one device."""

    def __init__(self, device, repeats: int, warmup: int):
        import torch

        self.torch, self.device, self.repeats, self.warmup = torch, device, repeats, warmup
        self.cuda = device.type == "cuda"

    def time(self, fn) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        samples = []
        for _ in range(self.repeats):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    def peak(self, fn) -> float | None:
        """Peak bytes allocated by one call above what was allocated before it."""
        if not self.cuda:
            return None
        torch = self.torch
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base


def grad_step(torch, forward, inputs, cotangent_seed=1):
    """(forward-only step, forward+backward step, output) for `forward()` and its differentiable inputs."""
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    out = forward()
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(cotangent_seed)).to(out)

    def fwd():
        forward()

    def step():
        torch.autograd.grad(forward(), wrt, cot, allow_unused=True)
    return fwd, step, out.detach()


def compare(ref, got) -> float:
    """Largest error relative to the reference's largest magnitude."""
    ref, got = ref.float(), got.float()
    return float((ref - got).abs().max() / ref.abs().max().clamp_min(1e-12))


# ---------------------------------------------------------------- inputs at the papers' shapes
def crystal_edges(torch, device, crystals: int, atoms: int, seed=0):
    """Image edges of random cells as Crystalformer builds them (method's image_edges, its reach)."""
    from methods.crystalformer.model import Crystalformer, image_edges

    g = torch.Generator().manual_seed(seed)
    vol = (torch.rand(crystals, generator=g) * 13 + 12) * atoms                  # 12-25 A^3 per atom
    lattice = (torch.eye(3) + 0.1 * torch.randn(crystals, 3, 3, generator=g)) * vol.pow(1 / 3)[:, None, None]
    frac = torch.rand(crystals, atoms, 3, generator=g)
    batch = {"pos": (frac @ lattice).double().to(device), "lattice": lattice.double().to(device),
             "mask": torch.ones(crystals, atoms, dtype=torch.bool, device=device)}
    reach = Crystalformer(mode="full").reach
    e = image_edges(batch, reach)
    return e["src"], e["dst"], e["r2"].float(), e["graph"]


def periodic_cases(torch, device, dtype, small: bool):
    from common.kernels.periodic_attention import periodic_attention

    crystals, atoms, heads, dk, basis = (2, 5, 2, 4, 6) if small else (64, 64, 8, 16, 64)
    src, dst, r2, _ = crystal_edges(torch, device, crystals, atoms)
    A = crystals * atoms
    g = torch.Generator().manual_seed(0)

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device, dtype).requires_grad_()

    q, k, v = leaf(A, heads, dk), leaf(A, heads, dk), leaf(A, heads, dk)
    isig = (torch.rand(A, heads, generator=g) * 0.3 + 0.2).to(device, dtype).requires_grad_()
    W_E = leaf(heads, basis, dk, scale=0.01)
    inputs = (q, k, v, isig, src, dst, r2, W_E)
    info = {"edges": len(src), "atoms": A, "heads": heads}
    r2 = r2.to(dtype)                # as the method does (r2 in the model's dtype)
    inputs = (q, k, v, isig, src, dst, r2, W_E)
    yield ("periodic_attention", f"{crystals}x{atoms} atoms, {heads} heads", info, inputs,
           {impl: (lambda impl=impl: periodic_attention(*inputs, r_max=14.0, impl=impl)) for impl in ("reference", "triton")})

    if dtype != torch.float32:       # the method runs bf16 under autocast; the layer row is fp32 only
        return
    # the method's whole attention layer today (chunked, checkpointed radial sum) vs the same layer on the kernel
    from methods.crystalformer.attention import PeriodicAttention

    att = PeriodicAttention(dim=heads * dk, heads=heads, mode="full", n_rbf=basis).to(device, dtype)
    att.calibrated.fill_(True)
    x = torch.randn(A, heads * dk, generator=g).to(device, dtype).requires_grad_()

    def wired():
        qq, kk, vv = (f(x).view(A, heads, dk) for f in (att.q, att.k, att.v))
        y = periodic_attention(qq, kk, vv, att.inv_sigma2(qq), src, dst, r2.to(dtype), att.W_E, r_max=att.r_max, impl="triton")
        return att.out(y.reshape(A, heads * dk))

    yield ("periodic_attention_layer", "method's PeriodicAttention vs wired", info, (x, *att.parameters()),
           {"reference": lambda: att(x, src, dst, r2.to(dtype)), "triton": wired})


def segment_cases(torch, device, dtype, small: bool):
    from common.kernels.segment import segment_mean, segment_softmax, segment_sum

    g = torch.Generator().manual_seed(0)
    es = torch.finfo(dtype).bits // 8

    def offsets_of(lengths):
        off = torch.zeros(len(lengths) + 1, dtype=torch.long)
        off[1:] = torch.cumsum(lengths, 0)
        return off.to(device)

    def leaf(*shape):
        return torch.randn(*shape, generator=g).to(device, dtype).requires_grad_()

    # Crystalformer's attention softmax over the images of each query atom
    src, _, _, graph = crystal_edges(torch, device, *((2, 5) if small else (64, 64)))
    A = len(graph)
    for T, H, offsets, what in ((len(src), 2 if small else 8, offsets_of(torch.bincount(src.cpu(), minlength=A)), "crystal edges"),
                                (*((50, 3) if small else (8_000_000, 8)), None, "large")):
        if offsets is None:
            offsets = offsets_of(torch.diff(torch.linspace(0, T, max(T // 80, 1) + 1).round().long()))
        scores = leaf(T, H)
        yield ("segment_softmax", f"{what} T={T}, H={H}", {"bytes": (2 * T * H * es, 3 * T * H * es), "bandwidth_case": what == "large"},
               (scores,), {impl: (lambda impl=impl, s=scores, o=offsets: segment_softmax(s, o, impl=impl))
                           for impl in ("reference", "triton")})
    # Crystalformer's mean pooling over the atoms of each crystal (small: launch-bound)
    D = 4 if small else 128
    x = leaf(A, D)
    pool_off = offsets_of(torch.bincount(graph.cpu()))
    S = len(pool_off) - 1
    yield ("segment_mean", f"pooling {A} atoms -> {S} crystals, D={D}", {"bytes": ((A + S) * D * es, (A + S) * D * es)},
           (x,), {impl: (lambda impl=impl: segment_mean(x, pool_off, impl=impl)) for impl in ("reference", "triton")})
    # large plain segment sum: the bandwidth case
    S, D = (20, 3) if small else (65536, 64)
    lengths = torch.randint(1, 128, (S,), generator=g)
    off = offsets_of(lengths)
    T = int(lengths.sum())
    rows = leaf(T, D)
    yield ("segment_sum", f"T={T} rows -> S={S}, D={D}", {"bytes": ((T + S) * D * es, (T + S) * D * es), "bandwidth_case": True}, (rows,),
           {impl: (lambda impl=impl: segment_sum(rows, off, impl=impl)) for impl in ("reference", "triton")})
    # CSR sparse x dense (LightHGNN's smoothing at a large hypergraph's size)
    N, S, D = (9, 20, 3) if small else (100_000, 50_000, 128)
    lengths = torch.randint(1, 40, (S,), generator=g)
    off = offsets_of(lengths)
    T = int(lengths.sum())
    index = torch.randint(0, N, (T,), generator=g).to(device)
    feats, weight = leaf(N, D), leaf(T)
    fwd_bytes = T * (D * es + 8 + es) + S * D * es
    bwd_bytes = 2 * T * (D * es + 8 + es) + N * D * es + S * D * es + T * es
    yield ("segment_sum_gather", f"spmm nnz={T}, {S}x{N}, D={D}", {"bytes": (fwd_bytes, bwd_bytes), "bandwidth_case": True},
           (feats, weight),
           {impl: (lambda impl=impl: segment_sum(feats, off, index, weight, impl=impl)) for impl in ("reference", "triton")})


def soft_moe_cases(torch, device, dtype, small: bool):
    from common.kernels.soft_moe import soft_moe

    B, M, D, n, p, h = (2, 9, 8, 4, 1, 16) if small else (128, 196, 384, 128, 1, 1536)
    g = torch.Generator().manual_seed(0)

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device, dtype).requires_grad_()

    scale = torch.ones((), device=device, dtype=dtype, requires_grad=True)
    inputs = (leaf(B, M, D), leaf(D, n * p, scale=D**-0.5), scale,
              leaf(n, D, h, scale=D**-0.5), leaf(n, h, scale=0.01), leaf(n, h, D, scale=h**-0.5), leaf(n, D, scale=0.01))
    yield ("soft_moe", f"S/16: B={B}, m={M}, d={D}, n={n}, p={p}", {}, inputs,
           {impl: (lambda impl=impl: soft_moe(*inputs, impl=impl)) for impl in ("reference", "triton")})


def vcas_cases(torch, device, dtype, small: bool):
    from common.kernels.sampled_linear import sampled_weight_grad

    N = 50 if small else 64 * 197
    layers = {"qkv": (768, 2304), "proj": (768, 768), "fc1": (768, 3072), "fc2": (3072, 768)}
    if small:
        layers = {"fc1": (8, 24)}
    g = torch.Generator().manual_seed(0)
    q = (torch.rand(N, generator=g) * 0.5 + 0.25).to(device)
    rows = (torch.rand(N, generator=g) < 0.5).nonzero().squeeze(1).to(device)      # nu = 0.5
    for name, (n_in, n_out) in layers.items():
        grad_out = torch.randn(N, n_out, generator=g).to(device, dtype)
        inp = torch.randn(N, n_in, generator=g).to(device, dtype)
        fns = {impl: (lambda impl=impl, a=grad_out, b=inp: sampled_weight_grad(a, b, rows, q, impl=impl))
               for impl in ("reference", "triton")}
        fns["exact"] = lambda a=grad_out, b=inp: a.t() @ b                           # the unsampled dW, for scale
        yield ("sampled_weight_grad", f"ViT-B {name} {n_in}->{n_out}, N={N}, kept={len(rows)}", {}, (), fns)


# ---------------------------------------------------------------- driver
def run_case(bench, torch, op, shape, info, inputs, fns) -> dict:
    row = {"op": op, "shape": shape, **{k: v for k, v in info.items() if k != "bytes"}}
    if "bytes" in info:
        row["bytes_fwd"], row["bytes_bwd"] = info["bytes"]
    outs = {}
    for impl, forward in fns.items():
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            fwd, step, outs[impl] = grad_step(torch, forward, inputs)
            row[f"{impl}_fwd_ms"] = bench.time(fwd) * 1e3
        else:                    # VCAS: the op is itself a backward computation
            outs[impl] = forward().detach()
            step = forward
        row[f"{impl}_ms"] = bench.time(step) * 1e3
        peak = bench.peak(step)
        row[f"{impl}_peak_mb"] = None if peak is None else peak / 2**20
    row["speedup"] = row["reference_ms"] / row["triton_ms"]
    if row.get("triton_peak_mb"):
        row["memory_ratio"] = row["reference_peak_mb"] / row["triton_peak_mb"]
    row["max_rel_err"] = compare(outs["reference"], outs["triton"])
    if "bytes" in info:
        fwd_bytes, bwd_bytes = info["bytes"]
        row["fwd_bound_ratio"] = row["triton_fwd_ms"] / 1e3 / (fwd_bytes / HBM_BYTES_PER_S)
        row["bound_ratio"] = row["triton_ms"] / 1e3 / ((fwd_bytes + bwd_bytes) / HBM_BYTES_PER_S)
    return row


def judge(rows: list[dict]) -> dict:
    """The issue's goals on the paper-shape rows (targets, not asserts)."""
    verdict = {}
    for r in rows:
        if "error" in r:
            continue
        key = f"{r['op']} {r['shape']} [{r['dtype']}]"
        if r["op"] == "periodic_attention":
            goal = GOALS["periodic_attention"]
            verdict[key] = {"speedup": r["speedup"], "memory_ratio": r.get("memory_ratio"),
                            "met": r["speedup"] >= goal["speedup"] and (r.get("memory_ratio") or 0) >= goal["memory_ratio"]}
        elif r.get("bandwidth_case") and "bound_ratio" in r:
            verdict[key] = {"bound_ratio": r["bound_ratio"], "met": r["bound_ratio"] <= GOALS["segment"]["bound_ratio"]}
        elif r["op"] == "soft_moe":
            verdict[key] = {"speedup": r["speedup"], "met": r["speedup"] >= GOALS["soft_moe"]["speedup"]}
    return verdict


def table(rows: list[dict]) -> str:
    def f(x, spec=".2f"):
        return "—" if x is None else format(x, spec)
    lines = ["| op | shape | dtype | ref ms | triton ms | speedup | ref MB | triton MB | memory ratio | ×bound | rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | error: {r['error'][:60]} |||||||||")
            continue
        lines.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {f(r['reference_ms'], '.3f')} | {f(r['triton_ms'], '.3f')} | "
                     f"{f(r['speedup'])}× | {f(r['reference_peak_mb'], '.1f')} | {f(r['triton_peak_mb'], '.1f')} | "
                     f"{f(r.get('memory_ratio'))} | {f(r.get('bound_ratio'))} | {f(r['max_rel_err'], '.1e')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--only", nargs="*", default=None, help="families: periodic segment soft_moe vcas")
    ap.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU under the Triton interpreter")
    ap.add_argument("--budget-s", type=float, default=420, help="skip the cases not started after this many seconds")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/gpu_kernels.json on CUDA)")
    args = ap.parse_args()
    if args.cpu_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")       # before any kernel module is imported
    import torch

    torch.set_num_threads(1)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_kernels: needs CUDA (no CUDA device on this machine); nothing measured. "
              "Run it on a GPU machine (scripts/gpu_check.sh), or --cpu-smoke to check the script.")
        return 0
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False      # fp32 rows in IEEE on both sides
    bench = Bench(device, repeats=1 if args.cpu_smoke else (5 if args.quick else 20), warmup=0 if args.cpu_smoke else 3)
    out = args.out or (None if args.cpu_smoke else "benchmarks/results/gpu_kernels.json")
    header = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreter smoke)",
              "torch": torch.__version__, "triton": _triton_version(), "hbm_bytes_per_s": HBM_BYTES_PER_S, "goals": GOALS}
    families = {"periodic": periodic_cases, "segment": segment_cases, "soft_moe": soft_moe_cases, "vcas": vcas_cases}
    rows, t0 = [], time.time()
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for fam, cases in families.items():
            if args.only and fam not in args.only:
                continue
            generated = cases(torch, device, dtype, small=args.cpu_smoke)
            while True:               # one case at a time: its inputs are freed before the next
                try:
                    case = next(generated, None)
                except Exception as err:          # a failing family must not cost the others' numbers
                    rows.append({"op": fam, "shape": "inputs", "dtype": dtype_name, "error": repr(err),
                                 "traceback": traceback.format_exc()})
                    print(f"[{fam} {dtype_name}] inputs failed: {err!r}", flush=True)
                    break
                if case is None:
                    break
                op, shape, info, inputs, fns = case
                if time.time() - t0 > args.budget_s:      # the whole script stays under 8 minutes
                    rows.append({"op": op, "shape": shape, "dtype": dtype_name, "error": "skipped: time budget spent"})
                    continue
                try:
                    row = {**run_case(bench, torch, op, shape, info, inputs, fns), "dtype": dtype_name}
                except Exception as err:
                    row = {"op": op, "shape": shape, "dtype": dtype_name, "error": repr(err),
                           "traceback": traceback.format_exc()}
                rows.append(row)
                print(f"[{time.time() - t0:6.1f}s] {op} {dtype_name}: " +
                      (f"error {row['error'][:200]}" if "error" in row else
                       f"speedup {row['speedup']:.2f}x, memory ratio {row.get('memory_ratio') or float('nan'):.2f}, "
                       f"rel err {row['max_rel_err']:.1e}"), flush=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                if out:               # rows so far, so that a run cut short still leaves its numbers
                    _write(out, {**header, "complete": False, "rows": rows, "seconds": time.time() - t0})
    text = table(rows)
    print(text)
    verdict = judge(rows)
    for key, v in verdict.items():
        print(f"goal {key}: {'MET' if v['met'] else 'not met'} {v}")
    if out:
        from common import results

        _write(out, {**header, "complete": True, "verdict": verdict, "rows": rows, "seconds": time.time() - t0})
        if not args.cpu_smoke:
            readme = Path(__file__).resolve().parent.parent / "common/kernels/README.md"
            results.update_marked_region(readme, "bench:gpu_kernels", text + "\n\n(`python benchmarks/gpu_kernels.py`; raw: "
                                         "`benchmarks/results/gpu_kernels.json`)")
        print(f"wrote {out}")
    return 1 if any("error" in r for r in rows) else 0


def _write(path: str, payload: dict) -> None:
    from common import results

    results.write(Path(path), payload)


def _triton_version() -> str | None:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
