"""NCL's paper configs compose, validate and build on meta, with the official colour distortion
(scripts/pretrain/cifar/augmentations/symmetric.yaml) in their Augment, which runs on an RGB batch."""
import pytest
import torch

from common.config import compose_checked
from common.reproduce.paper import build_on_meta
from common.ssl import Augment, apply, sample_params


@pytest.mark.parametrize("experiment", ["ncl_cifar10", "ncl_cifar100"])
def test_ncl_paper_config_builds_with_the_official_colour_jitter(experiment):
    cfg = compose_checked([f"experiment={experiment}"])
    model, count = build_on_meta(cfg)
    aug = model.augment
    assert isinstance(aug, Augment) and count > 11_000_000   # ResNet-18 + projector
    assert (aug.brightness, aug.contrast, aug.saturation, aug.hue) == (0.8, 0.8, 0.8, 0.2)
    assert aug.jitter_prob == 0.8 and aug.grayscale_prob == 0.2 and aug.min_scale == 0.08
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    views = apply(x, sample_params(4, aug, generator=torch.Generator().manual_seed(1)))
    assert views.shape == x.shape and 0 <= views.min() and views.max() <= 1
