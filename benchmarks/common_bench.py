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


def ssl_step(model_cls, cfg, batch: int):
    """(one training step of `model_cls` on random 28x28 grey images, those images), seeded."""
    import torch

    from common.nn import build_backbone

    torch.manual_seed(0)
    encoder, dim = build_backbone(cfg.backbone, 1, 28)
    model = model_cls(encoder, dim, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images = torch.randint(0, 256, (batch, 1, 28, 28), dtype=torch.uint8)

    def step():
        loss, _ = model.training_step(images)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step, images
