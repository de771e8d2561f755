"""A timm network by name, as timm builds it (its own ImageNet stem), as a backbone.

`common.nn.build_backbone` holds the house networks (SmallCNN, the CIFAR-stem ResNets, the ViT);
this builds what timm already has unchanged, e.g. `resnet18` with the 7x7 stride-2 conv and the
max-pool that the official SimCLR-style code uses on (Tiny)ImageNet. A config selects it with
`backbone: {_target_: common.nn.timm_backbone.timm_backbone, name: resnet18}`.
Kept in its own module: backbones.py is in the code or runtime fingerprint of every table whose
method imports it or whose config names `common.nn.build_backbone`, so a line there would make
those tables stale for no change in their networks; this module is fingerprinted only by the
configs that name it.
"""
from __future__ import annotations

import timm
from torch import nn

from common.config import UserError


def timm_backbone(name: str, in_chans: int, img_size: int, **options) -> tuple[nn.Module, int]:
    """(module mapping images (N, C, H, W) -> (N, D), D): `timm.create_model(name)` without its
    classifier. A model with a patch embedding (a ViT) is built for `img_size`; convolutional nets
    are size-agnostic. D is the width the model outputs without its classifier: `head_hidden_size`
    where timm sets one (a pre-logits layer, e.g. MobileNetV3), else `num_features`. `options` go to
    timm; null values are dropped (a row's reset)."""
    options = {k: v for k, v in options.items() if v is not None}
    if not timm.is_model(name):
        raise UserError(f"unknown timm model '{name}' (timm.list_models() lists them)", exit_code=2)
    try:
        model = timm.create_model(name, num_classes=0, in_chans=in_chans, **options)
        if hasattr(model, "patch_embed") and "img_size" not in options:
            model = timm.create_model(name, num_classes=0, in_chans=in_chans, img_size=img_size, **options)
    except TypeError as e:   # an option the model's constructor does not take
        raise UserError(f"timm model '{name}' does not take {sorted(options)}: {e}", exit_code=2) from e
    return model, getattr(model, "head_hidden_size", None) or model.num_features
