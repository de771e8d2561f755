from common.nn.backbones import SmallCNN, build_backbone, cifar_resnet

__all__ = ["SmallCNN", "build_backbone", "cifar_resnet"]
