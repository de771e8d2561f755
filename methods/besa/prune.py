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

from methods.besa.baselines import ONE_SHOT
from methods.besa.besa import BesaLinear, besa_loss

METHODS = ("magnitude", "wanda", "sparsegpt", "besa")


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
                optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> list[float]:
    """BESA on one block: wrap its linears in `BesaLinear`, train only the logits θ for `epochs`
    passes over the calibration batches (`inps`, dense targets `refs`), then apply the hard masks.
    Returns the loss of every step."""
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
    for n, w in wrapped.items():
        _set(layer, n, w.finish())
    for p, flag in trainable.items():
        p.requires_grad_(flag)
    return losses


def prune(model: nn.Module, calibration_ids: torch.Tensor, sparsity: float = 0.5, method: str = "besa", *,
          batch_size: int = 1, candidates: int = 100, lam: float = 5.0, epochs: int = 1,
          optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None = None,
          progress: bool = True, log: Callable[[dict, int], None] | None = None) -> dict[str, float]:
    """Prune `model` in place to `sparsity` (unstructured) with `method`, block by block.

    `calibration_ids` (n, seq_len) are propagated `batch_size` sequences at a time. BESA's knobs
    (ignored by the one-shot methods) have the paper's values: D = `candidates` = 100 candidate
    sparsities d/D, λ = `lam` = 5, one epoch at batch 1; `optimizer(params)` builds the optimizer
    of the logits θ (default Adam, lr 0.05). `log(metrics, step)` receives each block's mean loss.
    Returns each linear layer's sparsity ("<block>.<name>") plus "seconds_per_block".
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
    for li, layer in enumerate(tqdm(layers, desc=f"prune {method}", disable=not progress)):
        refs, stats = _dense_pass(layer, inps, kwargs, need_hessian=method == "sparsegpt")
        if method == "besa":
            losses = train_block(layer, inps, refs, kwargs, stats, sparsity, candidates=candidates, lam=lam,
                                 epochs=epochs, optimizer=optimizer)
            if log is not None:
                log({"loss": sum(losses) / len(losses)}, li)
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
    return sparsities


def overall_sparsity(model: nn.Module) -> float:
    """Zero fraction of all weights of the decoder blocks' linear layers."""
    zeros = total = 0
    for layer in decoder_layers(model):
        for m in _linears(layer).values():
            zeros += int((m.weight == 0).sum())
            total += m.weight.numel()
    return zeros / total
