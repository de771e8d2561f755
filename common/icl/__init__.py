"""The floor of the in-context packages (methods/mixreg_transformer, methods/icl_repr): Garg et al.'s
GPT-2 read-in/read-out model, the prompt streams, least squares and ridge on every prefix (issue #49)."""
from common.icl.model import ICLTransformer, interleave
from common.icl.predictions import (normalized_sq_error, ols_predictions, prompt_loss, ridge_predictions,
                                    transformer_predictions)
from common.icl.prompts import (TRAIN_STREAM, check_prompts, fixed_prompt_batches, fresh_prompt_batches,
                                seen_prompts, stream_seed)

__all__ = ["ICLTransformer", "interleave", "normalized_sq_error", "ols_predictions", "prompt_loss",
           "ridge_predictions", "transformer_predictions", "TRAIN_STREAM", "check_prompts",
           "fixed_prompt_batches", "fresh_prompt_batches", "seen_prompts", "stream_seed"]
