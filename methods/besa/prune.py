"""Block-by-block pruning of a causal LM.

The calibration sequences are propagated through the model one decoder block at a time:
block ℓ sees the outputs of the already pruned blocks 0..ℓ−1, its target is the dense block ℓ
applied to those same inputs, and its pruned outputs become the next block's inputs.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
from torch import nn
from tqdm import tqdm

from methods.besa.baselines import ONE_SHOT, wanda_score
from methods.besa.besa import BesaLinear, besa_loss
from methods.besa.project import project_counts, prune_rows_counts, random_row_sparsity

METHODS = ("magnitude", "wanda", "sparsegpt", "besa", "random")


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of decoder blocks of an HF causal LM (Llama: model.model.layers)."""
    for name in ("model.layers", "model.decoder.layers", "transformer.h"):
        obj = model
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return obj
    raise ValueError(f"cannot find the decoder blocks of {type(model).__name__}")


class _Stop(Exception):
    pass


@torch.no_grad()
def block_inputs(model: nn.Module, ids: torch.Tensor, batch: int) -> tuple[list[torch.Tensor], dict]:
    """Hidden states entering block 0 for each batch of `ids`, and the keyword arguments
    (rotary embeddings, masks) the model passes to its blocks (the same for every batch)."""
    layers = decoder_layers(model)
    first, seen = layers[0], {}

    class Catcher(nn.Module):
        def forward(self, h, **kwargs):
            seen.setdefault("h", []).append(h)
            seen["kwargs"] = kwargs
            raise _Stop

    layers[0] = Catcher()
    try:
        for i in range(0, len(ids), batch):
            try:
                model(ids[i:i + batch], use_cache=False)   # a KV cache would carry keys across batches
            except _Stop:
                pass
    finally:
        layers[0] = first
    kwargs = {k: (None if "cache" in k or "past_key" in k else v) for k, v in seen["kwargs"].items()}
    kwargs["use_cache"] = False
    return seen["h"], kwargs


def _run(layer, h, kwargs):
    out = layer(h, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _linears(layer: nn.Module) -> dict[str, nn.Linear]:
    return {n: m for n, m in layer.named_modules() if isinstance(m, nn.Linear)}


def _set(layer: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(layer.get_submodule(parent) if parent else layer, leaf, module)


@torch.no_grad()
def _dense_pass(layer, inps, kwargs, need_hessian: bool):
    """Dense outputs of `layer` on `inps` and each linear's input statistics: Σ_t x_t² per
    feature (for Wanda's ‖X_j‖) and, for SparseGPT, Σ_t x_t x_tᵀ."""
    stats = {}

    def hook(name):
        def fn(_, args, __):
            x = args[0].reshape(-1, args[0].shape[-1]).float()
            st = stats.setdefault(name, {"n": 0, "sq": torch.zeros(x.shape[1], dtype=torch.float64)})
            st["n"] += len(x)
            st["sq"] += x.pow(2).sum(0).double()
            if need_hessian:
                st["xtx"] = st.get("xtx", 0) + (x.t() @ x).double()
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in _linears(layer).items()]
    try:
        refs = [_run(layer, h, kwargs) for h in inps]
    finally:
        for h in handles:
            h.remove()
    return refs, stats


def train_block(layer, inps, refs, kwargs, stats, sparsity: float, *, candidates: int, lam: float, epochs: int,
                optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer], project: bool = False,
                record: dict | None = None) -> list[float]:
    """BESA on one block: wrap its linears in `BesaLinear`, train only the logits θ for `epochs`
    passes over the calibration batches (`inps`, dense targets `refs`), then apply the hard masks;
    with `project`, the learned row sparsities are first projected onto the block's budget
    (`project.project_counts`: the block drops exactly round(sparsity·N) weights). Returns the loss
    of every step; `record` receives the zeros the learned masks alone would drop ("raw_zeros")
    and the block's weight count ("weights")."""
    wrapped = {n: BesaLinear(m, stats[n]["sq"].sqrt(), candidates) for n, m in _linears(layer).items()}
    for n, w in wrapped.items():
        _set(layer, n, w)
    trainable = {p: p.requires_grad for p in layer.parameters()}
    for p in trainable:
        p.requires_grad_(False)
    thetas = [w.theta for w in wrapped.values()]
    for t in thetas:
        t.requires_grad_(True)
    opt, losses = optimizer(thetas), []
    with torch.enable_grad():
        for _ in range(epochs):
            for h, ref in zip(inps, refs):
                loss, _ = besa_loss(_run(layer, h, kwargs), ref, list(wrapped.values()), sparsity, lam)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
    layers = list(wrapped.values())
    if record is not None:
        record["raw_zeros"] = sum(float(l.hard_sparsity().sum()) * l.cols for l in layers)
        record["weights"] = sum(l.linear.weight.numel() for l in layers)
    counts = project_counts([l.row_sparsity() for l in layers], [l.cols for l in layers], sparsity) \
        if project else [None] * len(layers)
    for (n, w), c in zip(wrapped.items(), counts):
        _set(layer, n, w.finish(c))
    for p, flag in trainable.items():
        p.requires_grad_(flag)
    return losses


def prune(model: nn.Module, calibration_ids: torch.Tensor, sparsity: float = 0.5, method: str = "besa", *,
          batch_size: int = 1, candidates: int = 100, lam: float = 5.0, epochs: int = 1,
          optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None = None, project: bool = False,
          spread: float = 0.1, seed: int = 0, progress: bool = True,
          log: Callable[[dict, int], None] | None = None) -> dict[str, float]:
    """Prune `model` in place to `sparsity` (unstructured) with `method`, block by block.

    `calibration_ids` (n, seq_len) are propagated `batch_size` sequences at a time. BESA's knobs
    (ignored by the one-shot methods) have the paper's values: D = `candidates` = 100 candidate
    sparsities d/D, λ = `lam` = 5, one epoch at batch 1; `optimizer(params)` builds the optimizer
    of the logits θ (default Adam, lr 0.05). `project` (BESA only) holds each block's budget
    exactly by a final projection of the learned row sparsities onto the target (`project.py`; not in
    the paper, whose penalty alone only pulls towards it). `random` is the control allocation: Wanda's
    ranking with row sparsities drawn from `sparsity ± spread` (generator seeded with `seed`) and
    projected onto each block's budget. `log(metrics, step)` receives each block's mean loss.
    Returns each linear layer's sparsity ("<block>.<name>"), "seconds_per_block" and, for BESA,
    "raw_sparsity": the sparsity its learned masks alone reach (before any projection).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got '{method}'")
    if not 0 < sparsity < 1:
        raise ValueError(f"sparsity must be in (0, 1), got {sparsity}")
    if calibration_ids.dim() != 2:
        raise ValueError(f"calibration_ids must be (sequences, tokens), got shape {tuple(calibration_ids.shape)}")
    for name, value in (("batch_size", batch_size), ("candidates", candidates), ("epochs", epochs)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if optimizer is None:  # configs/trainer/blockwise.yaml
        optimizer = lambda params: torch.optim.Adam(params, lr=0.05)  # noqa: E731
    model.eval()
    layers = decoder_layers(model)
    inps, kwargs = block_inputs(model, calibration_ids, batch_size)
    sparsities, t0 = {}, time.perf_counter()
    raw_zeros = weights = 0.0
    generator = torch.Generator().manual_seed(int(seed))
    for li, layer in enumerate(tqdm(layers, desc=f"prune {method}", disable=not progress)):
        refs, stats = _dense_pass(layer, inps, kwargs, need_hessian=method == "sparsegpt")
        if method == "besa":
            record: dict = {}
            losses = train_block(layer, inps, refs, kwargs, stats, sparsity, candidates=candidates, lam=lam,
                                 epochs=epochs, optimizer=optimizer, project=project, record=record)
            raw_zeros, weights = raw_zeros + record["raw_zeros"], weights + record["weights"]
            if log is not None:
                log({"loss": sum(losses) / len(losses)}, li)
        elif method == "random":
            with torch.no_grad():
                lin = _linears(layer)
                rows = [random_row_sparsity(m.weight.shape[0], sparsity, spread, generator) for m in lin.values()]
                counts = project_counts(rows, [m.weight.shape[1] for m in lin.values()], sparsity)
                for (n, m), c in zip(lin.items(), counts):
                    score = wanda_score(m.weight.float(), stats[n]["sq"].sqrt().float())
                    m.weight.copy_(prune_rows_counts(m.weight, score, c))
        else:
            with torch.no_grad():
                for n, m in _linears(layer).items():
                    st = stats[n]
                    extra = {"x_norm": st["sq"].sqrt().float()}
                    if method == "sparsegpt":
                        extra["hessian"] = (2 * st["xtx"] / st["n"]).float()
                    m.weight.copy_(ONE_SHOT[method](m.weight, sparsity, **extra))
        with torch.no_grad():
            inps = [_run(layer, h, kwargs) for h in inps]
        for n, m in _linears(layer).items():
            sparsities[f"{li}.{n}"] = float((m.weight == 0).float().mean())
    sparsities["seconds_per_block"] = (time.perf_counter() - t0) / len(layers)
    if method == "besa":
        sparsities["raw_sparsity"] = raw_zeros / weights
    return sparsities


def overall_sparsity(model: nn.Module) -> float:
    """Zero fraction of all weights of the decoder blocks' linear layers."""
    zeros = total = 0
    for layer in decoder_layers(model):
        for m in _linears(layer).values():
            zeros += int((m.weight == 0).sum())
            total += m.weight.numel()
    return zeros / total
