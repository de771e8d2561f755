"""Growth operators: MSG's masked growth (official model_ex/{grow_ops_v2, copy_weight_ex,
utils_ex_v2}.py, read not copied), the Net2Net baseline, and the Adam-state transfer.

    expand_linear    old weights in the leading slices of the new ones (per q/k/v block of c_attn)
    init_weight_ex   new weights N(0, 0.02), biases 0, LayerNorm (1, 0) (init="zero": weights 0, a control)
    stack_block      new block i (appended on top) copies block idx[i − L] with
                     idx = [0..L−1]·(n // L − 1) + the top (n mod L) of [0..L−1]
    transfer_states  Adam step kept, moments embedded like the weights (zeros for new entries)
    end_grow         at μ = 1 the masks go: a plain GPT remains
"""
from __future__ import annotations

import dataclasses

import torch

from common.nn.gpt import GPT, GPTConfig
from methods.msg.model import MSGGPT

INITS = ("random", "stack", "zero")
_QKV = ".attn.c_attn."


def _sizes(config: GPTConfig) -> dict[str, int]:
    return {"n_embd": config.n_embd, "n_head": config.n_head, "n_inner": config.inner, "n_layer": config.n_layer}


def _leading(old_shape, new_shape, qkv: bool) -> list[tuple]:
    """The index tuples of new_param that receive old (a list of one, or of three for q/k/v blocks)."""
    if len(old_shape) != len(new_shape):
        raise ValueError(f"cannot embed a tensor of shape {tuple(old_shape)} into one of shape {tuple(new_shape)}")
    for o, n in zip(old_shape, new_shape):
        if o > n:
            raise ValueError(f"a dimension shrinks: {tuple(old_shape)} -> {tuple(new_shape)}")
    if not qkv:
        return [tuple(slice(0, o) for o in old_shape)]
    if old_shape[0] % 3 or new_shape[0] % 3:
        raise ValueError(f"qkv=True needs a first dimension divisible by 3, got {old_shape[0]} and {new_shape[0]}")
    o3, n3 = old_shape[0] // 3, new_shape[0] // 3
    rest = tuple(slice(0, o) for o in old_shape[1:])
    return [(slice(j * n3, j * n3 + o3),) + rest for j in range(3)]


def _place(old: torch.Tensor, new: torch.Tensor, qkv: bool) -> torch.Tensor:
    """new with old written into its leading slices (in place)."""
    o3 = old.shape[0] // 3 if qkv else old.shape[0]
    for j, idx in enumerate(_leading(old.shape, new.shape, qkv)):
        src = old[j * o3:(j + 1) * o3] if qkv else old
        new[idx] = src.to(new.dtype)
    return new


def embed_old(old: torch.Tensor, new_param: torch.Tensor, qkv: bool = False) -> torch.Tensor:
    """Zeros like new_param with old in the leading slices (per q/k/v block if qkv)."""
    return _place(old.detach(), torch.zeros_like(new_param), qkv)


def copy_adam_state(old_state: dict, new_param: torch.Tensor, qkv: bool = False) -> dict:
    """transfer_states: the Adam/AdamW state of a grown parameter: `step` kept, `exp_avg` and
    `exp_avg_sq` embedded (zeros for the new entries)."""
    missing = {"step", "exp_avg", "exp_avg_sq"} - set(old_state)
    if missing:
        raise ValueError(f"not an Adam state: missing {', '.join(sorted(missing))}")
    step = old_state["step"]
    return {"step": step.clone() if torch.is_tensor(step) else step,
            "exp_avg": embed_old(old_state["exp_avg"], new_param, qkv),
            "exp_avg_sq": embed_old(old_state["exp_avg_sq"], new_param, qkv)}


def mask_value(step: int, grow_step: int, ramp_steps: int) -> float:
    """clip((step − grow_step) / ramp_steps, 0, 1): 0 at the growth step, +1/ramp per step."""
    if ramp_steps < 1:
        raise ValueError(f"ramp_steps must be >= 1, got {ramp_steps}")
    return float(min(1.0, max(0.0, (step - grow_step) / ramp_steps)))


def in_growth(model) -> bool:
    return isinstance(model, MSGGPT) and any(bool((m < 1).any()) for m in model.masks.values())


def set_growth_mask(model: MSGGPT, value: float) -> MSGGPT:
    """Set every new entry's mask (those past `model.grown_from`) to value ∈ [0, 1]."""
    if not isinstance(model, MSGGPT):
        raise ValueError(f"set_growth_mask needs an MSGGPT, got {type(model).__name__}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"a mask value must be in [0, 1], got {value}")
    old = model.grown_from
    if old is None:
        raise ValueError("no growth in flight: grow() the model first")
    with torch.no_grad():
        model.hidden_mask[old["n_embd"]:] = value
        model.head_mask[old["n_embd"]:] = value
        model.ffn_mask[old["n_inner"]:] = value
        model.layer_mask[old["n_layer"]:] = value
    return model


def finish_growth(model: MSGGPT) -> GPT:
    """end_grow: a plain floor GPT with the same weights; every mask must have reached 1."""
    if not isinstance(model, MSGGPT):
        raise ValueError(f"finish_growth needs an MSGGPT, got {type(model).__name__}")
    if in_growth(model):
        low = min(float(m.min()) for m in model.masks.values())
        raise ValueError(f"finish_growth before the masks reach 1 (lowest mask {low})")
    p = next(model.parameters())
    with torch.random.fork_rng(devices=[]):
        out = GPT(model.config).to(device=p.device, dtype=p.dtype)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("_mask")}
    out.load_state_dict(state)
    return out


def stack_indices(old_layers: int, new_layers: int) -> list[int]:
    """stack_block's sources of the appended blocks: [0..L−1] repeated n // L − 1 times, then the top
    n mod L blocks."""
    if new_layers < old_layers:
        raise ValueError(f"a dimension shrinks: n_layer {old_layers} -> {new_layers}")
    if new_layers == old_layers:
        return []
    base = list(range(old_layers))
    top = new_layers % old_layers
    return base * (new_layers // old_layers - 1) + (base[old_layers - top:] if top else [])


def _target_config(config: GPTConfig, n_embd, n_head, n_inner, n_layer) -> GPTConfig:
    new = {"n_embd": n_embd, "n_head": n_head, "n_inner": n_inner, "n_layer": n_layer}
    old = _sizes(config)
    for key, value in new.items():
        if value is not None and value < old[key]:
            raise ValueError(f"a dimension shrinks: {key} {old[key]} -> {value}")
    kw = {k: v for k, v in new.items() if v is not None}
    if "n_inner" not in kw and ("n_embd" in kw) and config.n_inner is None:
        kw["n_inner"] = config.inner   # an implicit 4·d FFN does not grow with d
    cfg = dataclasses.replace(config, **kw)
    if cfg.n_embd // cfg.n_head != config.n_embd // config.n_head or cfg.n_embd % cfg.n_head:
        raise ValueError(f"the head size changes: {config.n_embd}/{config.n_head} -> {cfg.n_embd}/{cfg.n_head}; "
                         f"grow n_embd and n_head together")
    return cfg


def _init_new(model: GPT, generator: torch.Generator | None, zero: bool = False) -> None:
    """init_weight_ex on every parameter: Linear/Embedding N(0, 0.02) (0 when `zero`: the degenerate
    control init, whose new units never break symmetry), biases 0, LayerNorm (1, 0)."""
    std = 0.0 if zero else model.config.initializer_range
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype) * std)


def _check_source(model) -> None:
    if not isinstance(model, GPT):
        raise ValueError(f"grow needs a GPT or MSGGPT, got {type(model).__name__}")
    if in_growth(model):
        raise ValueError("a growth is in flight (a mask is below 1): finish_growth first; one growth at a time")


def grow(model: GPT, *, n_embd: int | None = None, n_head: int | None = None, n_inner: int | None = None,
         n_layer: int | None = None, init: str = "random", generator: torch.Generator | None = None) -> MSGGPT:
    """The grown MSGGPT (same dtype and device): old weights in the leading slices, new weights
    N(0, 0.02); new blocks appended on top, copied (`init="stack"`) or drawn (`"random"`); `"zero"`:
    every new weight 0 (the degenerate control). The new parts' masks 0 (function preserved exactly).
    None keeps a size."""
    _check_source(model)
    if init not in INITS:
        raise ValueError(f"unknown init '{init}'; choose one of {', '.join(INITS)}")
    cfg = _target_config(model.config, n_embd, n_head, n_inner, n_layer)
    p = next(model.parameters())
    with torch.random.fork_rng(devices=[]):
        new = MSGGPT(cfg).to(device=p.device, dtype=p.dtype)
    _init_new(new, generator, zero=init == "zero")
    old_sd = {k: v for k, v in model.state_dict().items() if not k.endswith("_mask")}
    new_params = dict(new.named_parameters())
    old_layers = model.config.n_layer
    with torch.no_grad():
        for key, value in old_sd.items():
            if key == "lm_head.weight" and cfg.tie_word_embeddings:
                continue
            _place(value, new_params[key].data, _QKV + "weight" in key or _QKV + "bias" in key)
        if init == "stack":
            for i, src in enumerate(stack_indices(old_layers, cfg.n_layer)):
                new.transformer.h[old_layers + i].load_state_dict(new.transformer.h[src].state_dict())
    new.grown_from = _sizes(model.config)
    set_growth_mask(new, 0.0)
    return new


def _mapping(old: int, new: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, count): new unit j copies old unit g[j] (identity on the old ones, a random old one for
    the new); count[j] = how many units copy g[j]."""
    extra = torch.randint(old, (new - old,), generator=generator) if new > old else torch.zeros(0, dtype=torch.long)
    g = torch.cat([torch.arange(old), extra])
    count = torch.bincount(g, minlength=old)[g]
    return g, count


def net2net_grow(model: GPT, *, n_embd: int | None = None, n_head: int | None = None, n_inner: int | None = None,
                 n_layer: int | None = None, generator: torch.Generator | None = None) -> GPT:
    """Net2Net (Chen et al. 2016): a new FFN unit, hidden dim or head copies a random old one; the
    weights reading it are split by the copy count; new blocks stacked as `stack`. Exact on the FFN
    only (LayerNorm statistics and the tied head see the copied hidden dims; a stacked block is
    not the identity)."""
    _check_source(model)
    cfg = _target_config(model.config, n_embd, n_head, n_inner, n_layer)
    old, p = model.config, next(model.parameters())
    hs = old.n_embd // old.n_head
    gh, ch = _mapping(old.n_embd, cfg.n_embd, generator)
    heads, _ = _mapping(old.n_head, cfg.n_head, generator)
    gc = (heads[:, None] * hs + torch.arange(hs)).reshape(-1)      # attention channels, whole heads
    cc = torch.bincount(gc, minlength=old.n_embd)[gc]
    gf, cf = _mapping(old.inner, cfg.inner, generator)
    sd = {k: v.detach() for k, v in model.state_dict().items() if not k.endswith("_mask")}
    out_sd = {}
    for key, w in sd.items():
        if key == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        if key in ("transformer.wte.weight", "transformer.wpe.weight"):
            w = w[:, gh]
        elif ".ln_" in key:
            w = w[gh]
        elif key.endswith("attn.c_attn.weight"):
            w = torch.cat([b[gc] for b in w.split(old.n_embd)])[:, gh] / ch.to(w.dtype)
        elif key.endswith("attn.c_attn.bias"):
            w = torch.cat([b[gc] for b in w.split(old.n_embd)])
        elif key.endswith("attn.c_proj.weight"):
            w = w[gh][:, gc] / cc.to(w.dtype)
        elif key.endswith("mlp.c_fc.weight"):
            w = w[gf][:, gh] / ch.to(w.dtype)
        elif key.endswith("mlp.c_fc.bias"):
            w = w[gf]
        elif key.endswith("mlp.c_proj.weight"):
            w = w[gh][:, gf] / cf.to(w.dtype)
        elif key.endswith("c_proj.bias"):
            w = w[gh]
        else:
            raise ValueError(f"net2net_grow does not know parameter '{key}'")
        out_sd[key] = w
    for i, src in enumerate(stack_indices(old.n_layer, cfg.n_layer)):
        prefix = f"transformer.h.{src}."
        for key in [k for k in out_sd if k.startswith(prefix)]:
            out_sd[f"transformer.h.{old.n_layer + i}." + key[len(prefix):]] = out_sd[key].clone()
    with torch.random.fork_rng(devices=[]):
        new = GPT(cfg).to(device=p.device, dtype=p.dtype)
    if cfg.tie_word_embeddings:
        out_sd["lm_head.weight"] = out_sd["transformer.wte.weight"]
    new.load_state_dict(out_sd)
    return new
