"""CARE = SimCLR + λ · L_equi on extra views whose augmentation is shared within a chunk."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from common.ssl import AugParams, ContrastiveModel, apply, sample_params, to_float
from methods.care.loss import care_loss, equivariance_loss


def chunk_params(chunks: int, per_chunk: int, aug_cfg, device="cpu") -> tuple[AugParams, AugParams]:
    """One fresh pair (t1_k, t2_k) per chunk, each repeated over the chunk's images.

    The official code draws them through nested vmap(randomness='same'), which gives every
    chunk the same pair; here each chunk's pair is sampled explicitly (README, Deviations).
    """
    t1 = sample_params(chunks, aug_cfg, device).repeat_interleave(per_chunk)
    t2 = sample_params(chunks, aug_cfg, device).repeat_interleave(per_chunk)
    return t1, t2


class CARE(ContrastiveModel):
    def equivariance_term(self, x: torch.Tensor) -> torch.Tensor:
        """L_equi on K chunks of the batch (x: float images (N, C, H, W)); extra forward passes."""
        k = self.cfg.chunks
        n = x.shape[0] // k
        x = x[: k * n]
        t1, t2 = chunk_params(k, n, self.cfg.augment, x.device)
        z = F.normalize(self.embed(torch.cat([apply(x, t1), apply(x, t2)])), dim=1)  # (2Kn, d)
        z1, z2 = z.chunk(2)
        return equivariance_loss(z1.view(k, n, -1), z2.view(k, n, -1))

    def training_step(self, images: torch.Tensor):
        x = to_float(images)
        nce = self.contrastive_loss(x)
        if self.cfg.equi_weight == 0:  # plain SimCLR: skip the extra forward passes
            return nce, {"infonce": nce.detach()}
        equi = self.equivariance_term(x)
        return care_loss(nce, equi, self.cfg.equi_weight), {"infonce": nce.detach(), "equi": equi.detach()}
