"""What contrastive methods share: augmentations, InfoNCE, projector and the SimCLR-style model.
The run template is common.tasks.contrastive; the evaluation protocols are in common.eval."""
from common.ssl.augment import Augment, AugParams, apply, multi_views, sample_params, two_views
from common.ssl.losses import info_nce
from common.ssl.model import ContrastiveModel
from common.ssl.projector import Projector

__all__ = ["Augment", "AugParams", "apply", "multi_views", "sample_params", "two_views", "info_nce", "ContrastiveModel",
           "Projector"]
