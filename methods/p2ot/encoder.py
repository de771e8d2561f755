"""The frozen encoder P²OT clusters with, pre-trained ONCE and cached (the paper clusters the
features of one fixed pre-trained encoder, DINO ViT-B/16): SimCLR on the balanced train
images with a fixed seed, the run's `trainer` recipe, saved under `method.encoder_cache.dir`
by a hash of everything that defines it; every run (every seed, every tuning value) that
agrees on those settings loads the same weights. Beside it, a supervised SmallCNN of the same
architecture (cached the same way) gives the kNN accuracy the SimCLR features are judged
against."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from common.checkpoint import save as atomic_save
from common.data.transforms import to_float
from common.eval import knn_accuracy


# The cached models' format, in every key: 2 = initialised under the cache seed (`cached_model`). Version 1
# (no version in the key) initialised the model under the RNG of whichever run first built the cache, so
# its weights depended on that run's seed; the version keeps such a stale cache from being loaded.
CACHE_VERSION = 2


def cache_key(*parts) -> str:
    """sha256 (16 hex digits) of the resolved config parts that define a cached model (and of
    `CACHE_VERSION`)."""
    blob = json.dumps([{"cache_version": CACHE_VERSION},
                       *(OmegaConf.to_container(p, resolve=True) if OmegaConf.is_config(p) else p for p in parts)],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class SupervisedNet(nn.Module):
    """Encoder + linear classifier, trained with cross-entropy: the supervised reference.
    `features` matches `common.ssl.ContrastiveModel.features` (uint8 in, encoder features out)."""

    def __init__(self, encoder: nn.Module, feat_dim: int, num_classes: int):
        super().__init__()
        self.encoder, self.classifier = encoder, nn.Linear(feat_dim, num_classes)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.encoder(to_float(images) * 2.0 - 1.0)

    def training_step(self, batch):
        images, labels = batch
        return F.cross_entropy(self.classifier(self.features(images)), labels.long()), {}


@torch.no_grad()
def encoder_knn(model: nn.Module, train: tuple, test: tuple, k: int, temperature: float,
                batch_size: int = 1024) -> float:
    """Weighted cosine kNN accuracy (%) of `model.features` (train: the labelled images the vote
    reads, test: the images classified; both (uint8 images, labels))."""
    model.eval()
    feats = [torch.cat([model.features(x[i:i + batch_size]).float().cpu() for i in range(0, len(x), batch_size)])
             for x, _ in (train, test)]
    return knn_accuracy(feats[0], train[1].long(), feats[1], test[1].long(), k=k, temperature=temperature)


def cached_model(ctx, make_model: Callable[[], nn.Module], key: str, cache_dir: str | Path, stage: str, batch_fn,
                 seed: int, trainer_cfg=None, evaluate=None) -> tuple[nn.Module, dict]:
    """`make_model()` trained by the shared Trainer (stage `stage`, `trainer_cfg` or the run's recipe),
    or loaded from `cache_dir/<stage>-<key>.pt` when an earlier run trained it. The model is
    constructed (its parameters initialised) and trained in a forked global RNG seeded with `seed`,
    so the cached weights depend on the cache's settings and seed only, never on the run that
    happens to build them, and the run's own RNG stream is the same whether the cache was built or
    loaded. `evaluate(model) -> dict` runs once, after training; its numbers are stored beside the
    weights. Returns the model, frozen in eval mode, and {cached, steps, **numbers}."""
    path = Path(cache_dir) / f"{stage}-{key}.pt"
    device = torch.device(ctx.device)
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model = make_model().to(device)
        if path.exists():
            state = torch.load(path, map_location=device, weights_only=True)
            model.load_state_dict(state["model"])
            info = {"cached": True, **state["info"]}
        else:
            trainer = ctx.trainer(model, batch_fn, stage=stage, trainer_cfg=trainer_cfg)
            trainer.fit(resume=ctx.resume)
            ctx.last_step = max(ctx.last_step, trainer.step)
            model.eval()
            info = {"steps": int(trainer.step), **(evaluate(model) if evaluate else {})}
            if ctx.hw.is_main:
                atomic_save({"step": trainer.step, "model": model.state_dict(), "info": info}, path)
            info = {"cached": False, **info}
    model.eval().requires_grad_(False)
    return model, info
