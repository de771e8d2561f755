"""A nanoGPT-style causal decoder with Hugging Face GPT-2 names, so GPT-2 weights load 1:1.

Borrowed, read not copied: the layout, GPT-2 init, fused attention and `generate` of nanoGPT
(karpathy/nanoGPT, MIT); the field and state-dict names of HF `GPT2Config` / `GPT2LMHeadModel`;
litgpt's dataclass config and FLOP bookkeeping (Apache-2.0). Differences from HF GPT-2: `nn.Linear`
(out, in) instead of `Conv1D` (in, out) (`load_hf_gpt2_state_dict` transposes), attention by
`F.scaled_dot_product_attention(is_causal=True)`, no KV cache (`use_cache` is accepted and ignored).

FLOP convention (`forward_flops`): 2·m·n·k per (m, k) x (k, n) product over one sequence of t
tokens, full t×t attention scores (as `torch.utils.flop_counter.FlopCounterMode` counts with the
MATH attention backend); embeddings, norms, activations and softmax are not counted.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu", "identity")


def activation_module(name: str) -> nn.Module:
    """The FFN activation as a module: gelu is exact (erf), gelu_new the tanh form of GPT-2,
    identity the linear-FFN control."""
    if name == "relu":
        return nn.ReLU()
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_new":
        return nn.GELU(approximate="tanh")
    if name == "silu":
        return nn.SiLU()
    if name == "identity":
        return nn.Identity()
    raise ValueError(f"unknown activation '{name}'; choose one of {', '.join(ACTIVATIONS)}")


@dataclass
class GPTConfig:
    """HF `GPT2Config` names; defaults are GPT-2 small (124M)."""
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.0
    embd_pdrop: float = 0.0
    attn_pdrop: float = 0.0
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True

    def __post_init__(self):
        for key in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            if getattr(self, key) < 1:
                raise ValueError(f"GPTConfig.{key} must be >= 1, got {getattr(self, key)}")
        if self.n_inner is not None and self.n_inner < 1:
            raise ValueError(f"GPTConfig.n_inner must be >= 1 or None, got {self.n_inner}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"unknown activation '{self.activation_function}'; choose one of {', '.join(ACTIVATIONS)}")
        for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ValueError(f"GPTConfig.{key} must be in [0, 1), got {getattr(self, key)}")

    @property
    def inner(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd


class CausalLMOutput(NamedTuple):
    loss: torch.Tensor | None
    logits: torch.Tensor


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)   # q, k, v stacked (HF order)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_pdrop = config.attn_pdrop
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_pdrop if self.training else 0.0,
                                           is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner)
        self.act = activation_module(config.activation_function)
        self.c_proj = nn.Linear(config.inner, config.n_embd)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Pre-LN decoder: x += attn(ln_1(x)); x += mlp(ln_2(x)); logits = lm_head(ln_f(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"GPT needs a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.n_positions, config.n_embd),
            drop=nn.Dropout(config.embd_pdrop),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        self.apply(self._init_weights)
        std = config.initializer_range / math.sqrt(2 * config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):    # residual projections (GPT-2 paper, nanoGPT)
                nn.init.normal_(p, mean=0.0, std=std)

    def _init_weights(self, module: nn.Module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Distinct parameters (a tied head counts once); without wte/wpe when `exclude_embeddings`."""
        skip = set()
        if exclude_embeddings:
            skip = {id(self.transformer.wte.weight), id(self.transformer.wpe.weight)}
        seen, total = set(), 0
        for p in self.parameters():
            if id(p) not in seen and id(p) not in skip:
                seen.add(id(p))
                total += p.numel()
        return total

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                use_cache: bool = False) -> CausalLMOutput:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
        t = input_ids.shape[1]
        if t > self.config.n_positions:
            raise ValueError(f"sequence of {t} tokens is longer than n_positions={self.config.n_positions}")
        pos = torch.arange(t, device=input_ids.device)
        x = self.transformer.drop(self.transformer.wte(input_ids) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if labels is not None:   # HF: position i predicts token i+1; -100 ignored; loss in fp32
            shift = logits[:, :-1].float()
            loss = F.cross_entropy(shift.reshape(-1, shift.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutput(loss, logits)


_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def load_hf_gpt2_state_dict(model: GPT, state_dict: dict) -> GPT:
    """Load an HF `GPT2LMHeadModel` state dict: the four Conv1D weights transposed, the causal-mask
    buffers `attn.bias` / `attn.masked_bias` ignored, `lm_head.weight` optional when tied."""
    ours = model.state_dict()
    incoming = {}
    for key, value in state_dict.items():
        if key.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if key not in ours:
            raise ValueError(f"unexpected key '{key}' in the GPT-2 state dict")
        if key.endswith(_CONV1D) and value.dim() == 2:
            value = value.t()
        if tuple(value.shape) != tuple(ours[key].shape):
            raise ValueError(f"'{key}' has shape {tuple(value.shape)}, the model expects {tuple(ours[key].shape)}")
        incoming[key] = value
    optional = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    missing = sorted(set(ours) - set(incoming) - optional)
    if missing:
        raise ValueError(f"missing key(s) in the GPT-2 state dict: {', '.join(missing[:5])}"
                         + (" ..." if len(missing) > 5 else ""))
    if "lm_head.weight" in incoming and model.config.tie_word_embeddings:
        incoming["lm_head.weight"] = incoming["transformer.wte.weight"]   # tied: one tensor
    with torch.no_grad():
        for key, value in incoming.items():
            ours[key].copy_(value)
    return model


def forward_flops(config: GPTConfig, seq_len: int) -> int:
    """Matmul FLOPs of one forward over one sequence of t tokens (2·m·n·k per product):
    n_layer·(6t·d² + 4t²·d + 2t·d² + 4t·d·inner) + 2t·d·vocab (qkv, scores and values, out
    projection, FFN; LM head)."""
    t, d = int(seq_len), config.n_embd
    if t < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    return config.n_layer * (6 * t * d * d + 4 * t * t * d + 2 * t * d * d + 4 * t * d * config.inner) \
        + 2 * t * d * config.vocab_size


def flops_per_token(config: GPTConfig, seq_len: int, training: bool = False) -> int:
    """forward_flops / t; x3 for a training step (backward = 2 x forward)."""
    return forward_flops(config, seq_len) // int(seq_len) * (3 if training else 1)


def ffn_activation_modules(model: nn.Module) -> list[nn.Module]:
    """The FFN activation modules in depth order: `*.mlp.act` (ours, HF GPT-2) or `*.mlp.act_fn`
    (HF Llama, e.g. SmolLM2)."""
    return [m for name, m in model.named_modules() if name.endswith((".mlp.act", ".mlp.act_fn"))
            or name in ("mlp.act", "mlp.act_fn")]


@contextlib.contextmanager
def record_ffn(model: nn.Module):
    """Yield one list per layer; each forward appends that layer's detached (batch, seq, inner)
    activation output. Hooks are removed on exit."""
    modules = ffn_activation_modules(model)
    if not modules:
        raise ValueError("no FFN activation module (*.mlp.act or *.mlp.act_fn) in the model")
    records: list[list[torch.Tensor]] = [[] for _ in modules]
    handles = [m.register_forward_hook(lambda _m, _i, out, rec=rec: rec.append(out.detach()))
               for m, rec in zip(modules, records)]
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def generate(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Append `max_new_tokens` sampled tokens to each row of `input_ids` (batch, t); the context is
    cropped to the last n_positions tokens; temperature 0 is greedy (argmax). The model's train
    mode is restored."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
    cfg = model.config
    n_pos = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings")
    was = model.training
    model.eval()
    try:
        ids = input_ids
        for _ in range(max_new_tokens):
            logits = model(ids[:, -n_pos:], use_cache=False).logits[:, -1, :].float()
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            ids = torch.cat([ids, nxt.to(ids.dtype)], dim=1)
    finally:
        model.train(was)
    return ids
