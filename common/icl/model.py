"""The in-context learner shared by the in-context packages (methods/mixreg_transformer,
methods/icl_repr): a GPT-2 decoder over interleaved (x, y) tokens, as in Garg et al. 2022
("What can transformers learn in-context?", github.com/dtsip/in-context-learning, src/models.py
TransformerModel). Moved here unchanged from methods/mixreg_transformer/model.py (issue #49):
the same parameters in the same order, so a seed builds the same weights."""
from __future__ import annotations

import torch
from einops import rearrange
from torch import nn
from transformers import GPT2Config, GPT2Model

from common.icl.predictions import prompt_loss
from common.icl.prompts import check_prompts


def interleave(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Tokens x_1, (y_1, 0, …, 0), x_2, (y_2, 0, …), …: xs (B, k, d), ys (B, k) -> (B, 2k, d)."""
    ys_wide = torch.cat([ys.unsqueeze(-1), ys.new_zeros(*ys.shape, xs.shape[-1] - 1)], dim=-1)
    return rearrange(torch.stack([xs, ys_wide]), "two b k d -> b (k two) d")


class ICLTransformer(nn.Module):
    """Linear read-in d -> width, a causal GPT-2 backbone (pre-LN blocks, learned positions,
    no dropout), linear read-out width -> 1 at the x tokens: position i sees x_1..x_i and
    y_1..y_{i-1}. Defaults are the 2022 paper's "standard" model (12 layers, 8 heads, width 256)."""

    def __init__(self, dim: int, width: int = 256, depth: int = 12, heads: int = 8, max_len: int = 64):
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by heads {heads}")
        self.dim, self.max_len = dim, max_len
        config = GPT2Config(n_positions=2 * max_len, n_embd=width, n_layer=depth, n_head=heads,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                            # inputs come as embeddings: a one-row token table instead of 50257 rows
                            vocab_size=1, bos_token_id=0, eos_token_id=0)
        self.read_in = nn.Linear(dim, width)
        self.backbone = GPT2Model(config)
        self.read_out = nn.Linear(width, 1)

    def _tokens(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        check_prompts(xs, ys)
        if xs.shape[-1] != self.dim:
            raise ValueError(f"the model reads x of width {self.dim}, got width {xs.shape[-1]}")
        if xs.shape[1] > self.max_len:
            raise ValueError(f"prompt length {xs.shape[1]} exceeds the model's max_len {self.max_len}")
        return self.read_in(interleave(xs, ys))                                                     # (B, 2k, width)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Predictions ŷ (B, k) of ys (B, k) from xs (B, k, d)."""
        hidden = self.backbone(inputs_embeds=self._tokens(xs, ys)).last_hidden_state  # (B, 2k, width)
        return self.read_out(hidden[:, ::2]).squeeze(-1)                               # x tokens: (B, k)

    def hidden_states(self, xs: torch.Tensor, ys: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """depth + 1 tensors (B, 2k, width): the embeddings (read-in + positions), then each
        block's output, the last after the final LayerNorm (GPT-2's `output_hidden_states`), so
        `read_out(states[-1])[:, ::2, 0]` is `forward`. Token 2i is x_{i+1}, token 2i+1 is y_{i+1}."""
        return self.backbone(inputs_embeds=self._tokens(xs, ys), output_hidden_states=True).hidden_states

    def training_step(self, batch):
        """batch = (xs, ys): (loss, logs) for common/trainer.py's Trainer."""
        xs, ys = batch[0], batch[1]
        predictions = self(xs, ys)
        loss = prompt_loss(predictions, ys)
        return loss, {"nmse_last": (predictions[:, -1] - ys[:, -1]).detach().square().mean() / self.dim}
