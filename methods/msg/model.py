"""The masked GPT of MSG: the floor's pre-LN GPT (common/nn/gpt.py) with growth masks.

Official code (cofe-ai/MSG, model_ex/bert_ex_v2.py, post-LN BERT) masks four kinds of structure;
here, on the pre-LN GPT (the issue's mapping; there is no official GPT code):
    hidden  (wte + wpe) ⊙ μ_h; every LayerNorm uses μ_h-weighted statistics (LayerNormEx) and its
            output is ⊙ μ_h; attention and FFN outputs ⊙ μ_h before the residual add; so the new
            hidden dims carry zeros everywhere and the tied head sees zeros there
    heads   q, k, v channels ⊙ μ_a (head size fixed, so a new head outputs v = 0)
    FFN     h = act(μ_f ⊙ (W₁x + b₁)) (mask before the activation; act(0) = 0)
    layers  x ← λ·block(x) + (1 − λ)·x for each block
With every mask 1 the forward is the plain GPT's (up to float rounding in the LN statistics).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from common.nn.gpt import GPT, CausalLMOutput, GPTConfig


def masked_layer_norm(x: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                      eps: float = 1e-5) -> torch.Tensor:
    """LayerNormEx: mean = Σμx/Σμ, var = Σμ(x − mean)²/Σμ over the last dim; output
    weight·(x − mean)/sqrt(var + eps) + bias (not masked: the caller multiplies by μ)."""
    if mask.dim() != 1 or mask.shape[0] != x.shape[-1]:
        raise ValueError(f"mask must be ({x.shape[-1]},), got shape {tuple(mask.shape)}")
    total = mask.sum()
    if not float(total) > 0:
        raise ValueError("masked_layer_norm needs a mask with a positive sum")
    mean = (x * mask).sum(-1, keepdim=True) / total
    var = (mask * (x - mean) ** 2).sum(-1, keepdim=True) / total
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


class MSGGPT(GPT):
    """The floor GPT (same parameter names) plus growth masks: buffers `hidden_mask`, `head_mask`
    (n_embd,), `ffn_mask` (inner,), `layer_mask` (n_layer,), all 1 at construction. `grown_from`
    holds the sizes before the growth in flight (None: no growth)."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        p = next(self.parameters())
        for name, n in (("hidden_mask", config.n_embd), ("head_mask", config.n_embd), ("ffn_mask", config.inner),
                        ("layer_mask", config.n_layer)):
            self.register_buffer(name, torch.ones(n, dtype=p.dtype, device=p.device))
        self.grown_from: dict | None = None

    @property
    def masks(self) -> dict[str, torch.Tensor]:
        return {"hidden": self.hidden_mask, "head": self.head_mask, "ffn": self.ffn_mask, "layer": self.layer_mask}

    def _ln(self, x: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
        return masked_layer_norm(x, self.hidden_mask, ln.weight, ln.bias, ln.eps) * self.hidden_mask

    def _block(self, block, x: torch.Tensor) -> torch.Tensor:
        hm, attn, mlp = self.hidden_mask, block.attn, block.mlp
        b, t, d = x.shape
        qkv = attn.c_attn(self._ln(x, block.ln_1))
        q, k, v = (z * self.head_mask for z in qkv.split(d, dim=2))
        q, k, v = (z.view(b, t, attn.n_head, d // attn.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=attn.attn_pdrop if self.training else 0.0,
                                           is_causal=True)
        x = x + attn.resid_dropout(attn.c_proj(y.transpose(1, 2).reshape(b, t, d))) * hm
        h = mlp.act(mlp.c_fc(self._ln(x, block.ln_2)) * self.ffn_mask)
        return x + mlp.dropout(mlp.c_proj(h)) * hm

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                use_cache: bool = False) -> CausalLMOutput:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
        t = input_ids.shape[1]
        if t > self.config.n_positions:
            raise ValueError(f"sequence of {t} tokens is longer than n_positions={self.config.n_positions}")
        tr = self.transformer
        pos = torch.arange(t, device=input_ids.device)
        x = tr.drop((tr.wte(input_ids) + tr.wpe(pos)) * self.hidden_mask)
        for lam, block in zip(self.layer_mask, tr.h):
            x = lam * self._block(block, x) + (1 - lam) * x
        logits = self.lm_head(self._ln(x, tr.ln_f))
        loss = None
        if labels is not None:
            shift = logits[:, :-1].float()
            loss = F.cross_entropy(shift.reshape(-1, shift.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutput(loss, logits)


class TinyLM(GPT):
    """The floor GPT from explicit arguments (for `_target_`): the start (small) or target model."""

    def __init__(self, vocab_size: int, n_positions: int = 64, n_embd: int = 128, n_layer: int = 4,
                 n_head: int = 4, n_inner: int | None = 512, activation_function: str = "gelu"):
        super().__init__(GPTConfig(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                                   n_head=n_head, n_inner=n_inner, activation_function=activation_function))
