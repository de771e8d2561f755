"""CARE's evaluation beside the linear probe and kNN: how augmentations act on the embedding
(W_f, γ_f and the two parts of γ_f) and what the embedding still knows (sensitivity R²)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from common.data.transforms import to_float
from common.ssl import Augment, AugParams, apply
from methods.care.colour import hue_of
from methods.care.metrics import (displacement, relative_equivariance, rotation_residual, sensitivity_r2,
                                  wahba_error)
from methods.care.model import Views, augment_images, sample_views


@torch.no_grad()
def equivariance_metrics(model: torch.nn.Module, splits: dict[str, tuple], device, *, seed: int,
                         num_images: int, num_augs: int, augment: Augment, hue: float, sensitivity_train: int,
                         sensitivity_test: int, hue_attribute: bool = False) -> dict[str, float]:
    """On the unit-sphere embedding that L_equi acts on (`model.embed`), over `num_augs`
    augmentations drawn from `augment` and `hue` (fixed by `seed`, and the same for every model
    whatever it was trained with) of `num_images` evaluation images:
    wahba_error W_f, rel_equivariance γ_f = rotation_residual / aug_displacement; and the R² of
    a ridge regression (fit on eval_train images, scored on evaluation images) that predicts
    the brightness factor of a brightness-changed image (sensitivity_r2) and, for tinted data,
    the image's own hue as (cos h, sin h) (hue_r2)."""
    def embed(x):  # float images (N, C, H, W) -> unit embedding (N, d), float64 on the CPU
        return torch.cat([F.normalize(model.embed(x[i:i + 512].to(device)), dim=1).cpu()
                          for i in range(0, len(x), 512)]).double()

    x = to_float(splits["test"][0][:num_images])
    gen = torch.Generator().manual_seed(seed)
    augs = sample_views(num_augs, augment, hue, generator=gen)
    F0 = embed(x)
    F_augs = [embed(augment_images(x, Views(augs.aug[a], augs.hue[a:a + 1]).repeat_interleave(len(x))))
              for a in range(num_augs)]
    out = {"wahba_error": sum(wahba_error(F0, Fa) for Fa in F_augs) / num_augs,
           "rel_equivariance": relative_equivariance(F0, torch.stack(F_augs)),
           "rotation_residual": sum(rotation_residual(F0, Fa) for Fa in F_augs) / num_augs,
           "aug_displacement": sum(displacement(F0, Fa) for Fa in F_augs) / num_augs}

    def brightness_set(images, offset):
        xb = to_float(images)
        p = AugParams.identity(len(xb))
        g = torch.Generator().manual_seed(seed + offset)
        p.brightness = 1 + augment.brightness * (2 * torch.rand(len(xb), generator=g) - 1)
        return embed(apply(xb, p)).float(), p.brightness

    train_imgs, test_imgs = splits["eval_train"][0][:sensitivity_train], splits["test"][0][:sensitivity_test]
    out["sensitivity_r2"] = sensitivity_r2(*brightness_set(train_imgs, 1), *brightness_set(test_imgs, 2))
    if hue_attribute:
        def hue_set(images):
            h = hue_of(images)
            return embed(to_float(images)).float(), torch.stack([torch.cos(h), torch.sin(h)], dim=1)
        out["hue_r2"] = sensitivity_r2(*hue_set(train_imgs), *hue_set(test_imgs))
    return out
