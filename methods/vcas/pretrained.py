"""Paper-tier networks and data: a pretrained timm ViT on images, BERT on GLUE (online, or
the local Hugging Face cache). Each network exposes `.blocks`, the blocks VCAS samples."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common.config import UserError
from common.data.transforms import to_float

GLUE_KEYS = {"sst2": ("sentence", None, "validation"), "mnli": ("premise", "hypothesis", "validation_matched"),
             "qqp": ("question1", "question2", "validation")}


def _on_meta() -> bool:
    """Inside `with torch.device('meta')` (--dry-run): build the shapes, load no weights."""
    return torch.empty(0).device.type == "meta"


class PretrainedViT(nn.Module):
    """A timm ViT by name, fed images resized to its input size (grey repeated to 3 channels).
    The geometry arguments are the config's statement of what `name` is; a mismatch is an error."""

    def __init__(self, img_size: int, in_chans: int, num_classes: int, name: str = "vit_base_patch16_224.augreg_in21k",
                 pretrained: bool = True, patch_size: int = 16, dim: int = 768, depth: int = 12, heads: int = 12,
                 mlp_ratio: float = 4.0, pool: str = "token"):
        super().__init__()
        import timm
        self.vit = timm.create_model(name, pretrained=pretrained and not _on_meta(), num_classes=num_classes)
        found = {"patch_size": self.vit.patch_embed.patch_size[0], "dim": self.vit.embed_dim, "depth": len(self.vit.blocks),
                 "heads": self.vit.blocks[0].attn.num_heads, "pool": self.vit.global_pool,
                 "mlp_ratio": self.vit.blocks[0].mlp.fc1.out_features / self.vit.embed_dim}
        stated = {"patch_size": patch_size, "dim": dim, "depth": depth, "heads": heads, "pool": pool, "mlp_ratio": mlp_ratio}
        if found != stated:
            raise ValueError(f"timm model '{name}' is {found}, the config states {stated}")
        self.blocks = self.vit.blocks
        cfg = self.vit.pretrained_cfg
        self.size = cfg["input_size"][-1]
        self.register_buffer("mean", torch.tensor(cfg["mean"]).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(cfg["std"]).view(1, -1, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:   # (N, C, H, W) uint8 or [0, 1]
        x = to_float(images)
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        x = F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        return self.vit((x - self.mean) / self.std)


class BertClassifier(nn.Module):
    """A Hugging Face sequence classifier on a dict of token tensors; dropout as pretrained."""

    def __init__(self, name: str = "bert-base-cased", num_labels: int = 2):
        super().__init__()
        import transformers
        try:
            if _on_meta():
                self.hf = transformers.AutoModelForSequenceClassification.from_config(
                    transformers.AutoConfig.from_pretrained(name, num_labels=num_labels))
            else:
                self.hf = transformers.AutoModelForSequenceClassification.from_pretrained(name, num_labels=num_labels)
        except OSError as err:
            raise UserError(f"could not load '{name}' ({err}); it downloads from the Hugging Face Hub on first "
                            "use: run once online or set HF_HOME to a cache that has it.") from err
        self.blocks = self.hf.base_model.encoder.layer

    def forward(self, inputs: dict) -> torch.Tensor:   # {input_ids, attention_mask, ...}: (N, T) each
        return self.hf(**inputs).logits


def glue_splits(task: str = "sst2", tokenizer: str = "bert-base-cased", max_length: int = 128) -> dict:
    """{'train', 'test'}: (dict of padded (N, max_length) token tensors, labels); test is the
    validation split the paper reports."""
    if task not in GLUE_KEYS:
        raise UserError(f"method.glue.task must be one of {sorted(GLUE_KEYS)}, got '{task}'", exit_code=2)
    try:
        import datasets
        import transformers
    except ImportError as err:
        raise UserError(f"the GLUE tasks need the llm extra: pip install -e '.[llm]' ({err})") from err
    first, second, val = GLUE_KEYS[task]
    try:
        raw = datasets.load_dataset("glue", task)
        tok = transformers.AutoTokenizer.from_pretrained(tokenizer)
    except OSError as err:
        raise UserError(f"could not load glue/{task} or the '{tokenizer}' tokenizer ({err}); they download from "
                        "the Hugging Face Hub on first use: run once online or set HF_HOME.") from err

    def encode(split):
        d = raw[split]
        enc = tok(d[first], d[second] if second else None, truncation=True, max_length=max_length,
                  padding="max_length", return_tensors="pt")
        return dict(enc), torch.tensor(d["label"])

    return {"train": encode("train"), "test": encode(val)}
