"""What VCAS trains: a ViT on images (timm) or a BERT-style encoder on GLUE (transformers).

Each builder returns the network, its repeated blocks, and the splits as tensors: images as
`(x, y)`, text as a dict of padded token tensors with "labels".
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common import data
from common.config import UserError
from methods.vcas.model import ViTClassifier

GLUE_KEYS = {"sst2": ("sentence", None, "validation"), "mnli": ("premise", "hypothesis", "validation_matched"),
             "qqp": ("question1", "question2", "validation")}


class PretrainedViT(nn.Module):
    """A timm ViT (pretrained weights when online) fed images resized to its input size."""

    def __init__(self, name: str, num_classes: int, pretrained: bool):
        super().__init__()
        import timm
        self.vit = timm.create_model(name, pretrained=pretrained, num_classes=num_classes)
        self.blocks = self.vit.blocks
        cfg = self.vit.pretrained_cfg
        self.size = cfg["input_size"][-1]
        self.register_buffer("mean", torch.tensor(cfg["mean"]).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(cfg["std"]).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() / 255 if x.dtype == torch.uint8 else x.float()
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        x = F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        return self.vit((x - self.mean) / self.std)


def image_task(cfg):
    splits = data.image_splits(cfg.dataset)
    m, ds = cfg.method, cfg.dataset
    if m.backbone == "vit_small_scratch":
        net = ViTClassifier(m, ds.img_size, ds.in_chans, ds.num_classes)
    else:
        net = PretrainedViT(m.backbone, ds.num_classes, pretrained=m.pretrained)
    return net, net.blocks, splits["train"], {"train_eval": splits["eval_train"], "test": splits["test"]}


def glue_task(cfg):
    """BERT fine-tuning on a GLUE task through `datasets` (online, or its local cache)."""
    try:
        import datasets
        import transformers
    except ImportError as err:
        raise UserError(f"the GLUE tasks need the llm extra: pip install -e '.[llm]' ({err})") from err
    m = cfg.method
    if m.glue_task not in GLUE_KEYS:
        raise UserError(f"method.glue_task must be one of {sorted(GLUE_KEYS)}, got '{m.glue_task}'")
    first, second, val = GLUE_KEYS[m.glue_task]
    try:
        raw = datasets.load_dataset("glue", m.glue_task)
        tok = transformers.AutoTokenizer.from_pretrained(m.backbone)
        # dropout 0: a wrapped layer is recomputed in the backward and must be deterministic
        net = transformers.AutoModelForSequenceClassification.from_pretrained(
            m.backbone, num_labels=raw["train"].features["label"].num_classes,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    except OSError as err:  # offline with no cache: name what was looked for and how to get it
        raise UserError(f"could not load glue/{m.glue_task} or '{m.backbone}' ({err}). They download "
                        "from the Hugging Face Hub on first use; run once online or set HF_HOME "
                        "to a cache that has them.") from err

    def encode(split):
        d = raw[split]
        enc = tok(d[first], d[second] if second else None, truncation=True, max_length=m.max_length,
                  padding="max_length", return_tensors="pt")
        return {**dict(enc), "labels": torch.tensor(d["label"])}

    train = encode("train")
    return net, net.base_model.encoder.layer, train, {"test": encode(val)}


def build(cfg):
    return glue_task(cfg) if cfg.method.get("glue_task") else image_task(cfg)
