"""The in-context learner: a GPT-2 decoder over interleaved (x, y) tokens, as in Garg et al.
2022 ("What can transformers learn in-context?", github.com/dtsip/in-context-learning,
src/models.py TransformerModel), which the paper trains unchanged. It lives in common/icl since
issue #49 (`ICLTransformer`); `MixRegTransformer` is the same class."""
from __future__ import annotations

from common.icl.model import ICLTransformer, interleave

MixRegTransformer = ICLTransformer

__all__ = ["MixRegTransformer", "interleave"]
