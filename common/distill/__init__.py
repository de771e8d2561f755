"""Dataset distillation floor (issue #43): synthetic sets, unrolled training, expert buffers,
evaluation. Shared by DATM, KRR-ST and later distillation papers; see README.md."""
from common.distill.coreset import herding_coreset, kmeans_coreset
from common.distill.evaluate import evaluate_synthetic
from common.distill.experts import cached, data_digest, expert_buffer, fingerprint, train_expert
from common.distill.krr import append_bias, krr_predict
from common.distill.networks import ConvNet
from common.distill.synthetic import SyntheticSet, class_balanced_indices
from common.distill.unroll import (flatten_params, functional_forward, param_matching_loss, soft_cross_entropy,
                                   target_loss, unflatten_params, unrolled_sgd)
from common.distill.zca import ZCA

__all__ = ["ConvNet", "SyntheticSet", "ZCA", "append_bias", "cached", "class_balanced_indices", "data_digest",
           "evaluate_synthetic", "expert_buffer", "fingerprint", "flatten_params", "functional_forward",
           "herding_coreset", "kmeans_coreset", "krr_predict", "param_matching_loss", "soft_cross_entropy",
           "target_loss", "train_expert", "unflatten_params", "unrolled_sgd"]
