"""What contrastive methods share: augmentations, InfoNCE, projector, the SimCLR-style model,
the pre-train-then-probe run, linear probe and kNN."""
from common.ssl.augment import AugParams, apply, sample_params, to_float, two_views
from common.ssl.evaluate import extract, knn_accuracy, linear_probe
from common.ssl.losses import info_nce
from common.ssl.model import ContrastiveModel
from common.ssl.pretrain import evaluate_features, run_contrastive
from common.ssl.projector import Projector

__all__ = ["AugParams", "apply", "sample_params", "to_float", "two_views", "extract",
           "knn_accuracy", "linear_probe", "info_nce", "ContrastiveModel", "evaluate_features",
           "run_contrastive", "Projector"]
