"""Backbones by name: timm where timm has them, a small CNN for CPU runs."""
from __future__ import annotations

import timm
from torch import nn

from common.config import UserError
from common.nn.vit import build_vit


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


_OPTIONS = {"small_cnn": {"width"}, "resnet18_cifar": set(), "resnet50_cifar": set(),
            "vit_tiny": {"width", "patch_size", "depth", "heads"}, "flatten": set()}


def build_backbone(name: str, in_chans: int, img_size: int, **options) -> tuple[nn.Module, int]:
    """Return (module mapping images (N, C, H, W) -> (N, D), D). Options by backbone:
    small_cnn: width; vit_tiny: width, patch_size, depth, heads; others none. An option the
    backbone does not read is an error (a config key must never be a silent no-op)."""
    options = {k: v for k, v in options.items() if v is not None}  # null = not set (a row's reset)
    if name not in _OPTIONS:
        raise UserError(f"unknown backbone '{name}'; choose one of {', '.join(_OPTIONS)}", exit_code=2)
    unread = sorted(set(options) - _OPTIONS[name])
    if unread:
        raise UserError(f"backbone '{name}' does not read {unread}; its options are "
                        f"{sorted(_OPTIONS[name]) or 'none'}", exit_code=2)
    if name == "small_cnn":
        model = SmallCNN(in_chans, **options)
    elif name in ("resnet18_cifar", "resnet50_cifar"):
        model = cifar_resnet(name.removesuffix("_cifar"), in_chans)
    elif name == "vit_tiny":
        o = {"width": 192, "patch_size": 4, "depth": 12, "heads": 3, **options}
        model = build_vit(img_size, o["patch_size"], in_chans, 0, o["width"], o["depth"], o["heads"], pool="token")
        model.num_features = o["width"]
    else:  # raw pixels: the reference row of the SSL tables
        model = nn.Flatten()
        model.num_features = in_chans * img_size * img_size
    return model, model.num_features
