"""Helpers for benchmarks: interleaved repeated timing and a JSON writer with provenance."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from common import results

OUT = Path(__file__).resolve().parent / "results"


def saved_bytes(fn) -> int:
    """Bytes of the distinct tensors autograd saves for backward while fn() runs (the activation
    memory of a loss, measured the same on CPU and GPU)."""
    seen = {}

    def pack(t):
        seen[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def best_of(fn, repeats: int):
    """(min seconds, last result) over `repeats` calls."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def interleaved(fns: dict, repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each callable, measured in alternation so drift hits all alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            samples[k] += timed(fn, 1)
    return {k: statistics.median(v) for k, v in samples.items()}


def save(name: str, payload: dict, table: str | None = None) -> Path:
    """Write the JSON (with provenance); put `table` into READMEs with a `bench:<name>` region."""
    path = OUT / f"{name}.json"
    results.write(path, payload)
    if table:
        results.update_readmes(f"bench:{name}", table + f"\n\n(`python benchmarks/{name}.py`; raw: `benchmarks/results/{name}.json`)")
    return path


def train_step(model, images):
    """A closure running one AdamW step of `model.training_step(images)` (seeded model, fixed batch)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        loss, _ = model.training_step(images)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step
