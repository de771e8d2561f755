"""The tiny causal LM of the mini tier: the floor's GPT with explicit arguments and a training step."""
from __future__ import annotations

from common.nn.gpt import GPT, GPTConfig


class TinyLM(GPT):
    """common.nn.gpt.GPT (pre-LN, GPT-2 init, tied head) built from explicit arguments; the FFN
    activation is `activation_function` (relu, gelu, gelu_new, silu, identity)."""

    def __init__(self, vocab_size: int, n_positions: int = 64, n_embd: int = 128, n_layer: int = 4,
                 n_head: int = 4, n_inner: int | None = 512, activation_function: str = "relu"):
        super().__init__(GPTConfig(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                                   n_head=n_head, n_inner=n_inner, activation_function=activation_function))

    def training_step(self, batch):
        """batch: (B, t) token ids; (next-token cross-entropy, logs) for common/trainer.py."""
        return self(batch, labels=batch).loss, {}
