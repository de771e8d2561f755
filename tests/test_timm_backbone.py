"""common.nn.timm_backbone: timm's ImageNet-stem ResNets beside the house CIFAR-stem ones."""
import pytest
import torch
from torch import nn

from common.config import UserError
from common.nn.backbones import build_backbone
from common.nn.timm_backbone import timm_backbone


@pytest.mark.parametrize("name, dim", [("resnet18", 512), ("resnet50", 2048)])
def test_imagenet_stem_resnet(name, dim):
    model, feat = timm_backbone(name, in_chans=3, img_size=64)
    assert feat == dim and model.conv1.kernel_size == (7, 7) and model.conv1.stride == (2, 2)
    assert isinstance(model.maxpool, nn.MaxPool2d) and model.maxpool.stride == 2
    cifar, _ = build_backbone(name + "_cifar", in_chans=3, img_size=64)
    assert cifar.conv1.kernel_size == (3, 3) and isinstance(cifar.maxpool, nn.Identity)
    model.eval()
    with torch.no_grad():
        assert model(torch.rand(2, 3, 64, 64)).shape == (2, dim)
        # the stem divides by 4 before layer1 (64 -> 16), the CIFAR stem not at all
        assert model.maxpool(model.act1(model.bn1(model.conv1(torch.rand(1, 3, 64, 64))))).shape[-1] == 16


def test_a_null_option_is_dropped_and_a_bad_one_or_name_is_a_user_error():
    assert timm_backbone("resnet18", in_chans=1, img_size=32, width=None)[0].conv1.in_channels == 1
    with pytest.raises(UserError, match="does not take"):
        timm_backbone("resnet18", in_chans=3, img_size=64, width=8)
    with pytest.raises(UserError, match="unknown timm model 'resnet_nope'"):
        timm_backbone("resnet_nope", in_chans=3, img_size=64)


@pytest.mark.parametrize("name, size", [("mobilenetv3_small_100", 32), ("vit_tiny_patch16_224", 64)])
def test_the_width_is_what_the_model_outputs_and_a_vit_is_built_for_the_image_size(name, size):
    """MobileNetV3 has a pre-logits layer (num_features 576, output 1024); a ViT takes img_size."""
    model, feat = timm_backbone(name, in_chans=3, img_size=size)
    with torch.no_grad():
        assert model.eval()(torch.rand(2, 3, size, size)).shape == (2, feat)
