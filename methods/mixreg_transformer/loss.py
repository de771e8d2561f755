"""The training objective and the evaluation errors (paper section 3, following Garg et al. 2022):
`prompt_loss` and `normalized_sq_error` live in common/icl since issue #49."""
from __future__ import annotations

from common.icl.predictions import normalized_sq_error, prompt_loss

__all__ = ["normalized_sq_error", "prompt_loss"]
