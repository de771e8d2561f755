"""Backbones by name: timm where timm has them, a small CNN for CPU runs."""
from __future__ import annotations

import timm
from torch import nn

from common.config import UserError


class SmallCNN(nn.Sequential):
    """Four 3x3 conv blocks (two with stride 2) and global average pooling; ~30k-120k params."""

    def __init__(self, in_chans: int = 1, width: int = 32):
        w = width
        layers, c_in = [], in_chans
        for c_out, stride in ((w, 1), (2 * w, 2), (4 * w, 2), (4 * w, 1)):
            layers += [nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            c_in = c_out
        super().__init__(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.num_features = 4 * w


def cifar_resnet(name: str, in_chans: int) -> nn.Module:
    """timm ResNet with the CIFAR stem: 3x3 stride-1 conv1 and no max-pool."""
    model = timm.create_model(name, num_classes=0, in_chans=in_chans)
    model.conv1 = nn.Conv2d(in_chans, model.conv1.out_channels, 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
    return model


def build_backbone(cfg, in_chans: int, img_size: int) -> tuple[nn.Module, int]:
    """Return (module mapping images (N, C, H, W) -> (N, D), D) for `cfg.name`."""
    name = cfg.name
    if name == "small_cnn":
        model = SmallCNN(in_chans, cfg.width)
    elif name in ("resnet18_cifar", "resnet50_cifar"):
        model = cifar_resnet(name.removesuffix("_cifar"), in_chans)
    elif name == "vit_tiny":
        model = timm.models.vision_transformer.VisionTransformer(
            img_size=img_size, patch_size=cfg.patch_size, in_chans=in_chans, num_classes=0,
            embed_dim=cfg.width, depth=cfg.depth, num_heads=cfg.heads, mlp_ratio=4.0)
    elif name == "flatten":  # raw pixels: the reference row of the SSL tables
        model = nn.Flatten()
        model.num_features = in_chans * img_size * img_size
    else:
        raise UserError(f"unknown backbone '{name}'; choose small_cnn, resnet18_cifar, "
                        f"resnet50_cifar, vit_tiny or flatten", exit_code=2)
    return model, model.num_features
