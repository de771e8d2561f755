from common.nn.backbones import SmallCNN, build_backbone, cifar_resnet
from common.nn.vit import ViTClassifier, build_vit

__all__ = ["SmallCNN", "ViTClassifier", "build_backbone", "build_vit", "cifar_resnet"]
