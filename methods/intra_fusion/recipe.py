"""The paper tier's dense-training recipe where the shared framework has no equivalent: the
official CIFAR preprocessing (ImageNet statistics, 4-pixel crops and flips; `utils.py` of the
official code), the paper's step decay of the learning rate (Appendix A.1, Table 2:
0.05 · 0.5^⌊epoch/30⌋), and loading a dense checkpoint instead of training."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from common.data.download import fetch, sha256


def standardise(images: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 (N, C, H, W): (x / 255 − mean_c) / std_c per channel
    (`mean`, `std`: one value per channel, or one for all)."""
    mean, std = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
    c = images.shape[1]
    if mean.numel() not in (1, c) or std.numel() not in (1, c):
        raise ValueError(f"normalize mean/std need 1 or {c} values (one per channel), got {mean.tolist()} / "
                         f"{std.tolist()}")
    if (std <= 0).any():
        raise ValueError(f"normalize std must be > 0, got {std.tolist()}")
    shape = (1, -1, 1, 1)
    return (images.float() / 255 - mean.view(shape).to(images.device)) / std.view(shape).to(images.device)


def crop_flip(images: torch.Tensor, padding: int, flip: bool, generator: torch.Generator) -> torch.Tensor:
    """torchvision's RandomCrop(size, padding) (zero fill) and RandomHorizontalFlip(0.5), one draw
    per image: (N, C, H, W) -> (N, C, H, W), same dtype. Apply to the stored images, before
    standardising, as the official loader does (a padded pixel is 0 before normalisation)."""
    n, _, h, w = images.shape
    if padding < 0:
        raise ValueError(f"crop_padding must be >= 0, got {padding}")
    out = images
    if padding:
        padded = nn.functional.pad(images, (padding,) * 4)                     # (N, C, H+2p, W+2p)
        dy = torch.randint(0, 2 * padding + 1, (n,), generator=generator).to(images.device)
        dx = torch.randint(0, 2 * padding + 1, (n,), generator=generator).to(images.device)
        rows = (dy[:, None] + torch.arange(h, device=images.device))[:, None, :, None]   # (N, 1, H, 1)
        cols = (dx[:, None] + torch.arange(w, device=images.device))[:, None, None, :]   # (N, 1, 1, W)
        idx = torch.arange(n, device=images.device)[:, None, None, None]
        chans = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
        out = padded[idx, chans, rows, cols]
    if flip:
        mirror = (torch.rand(n, generator=generator) < 0.5).to(images.device)[:, None, None, None]
        out = torch.where(mirror, out.flip(3), out)
    return out


def use_step_decay(trainer, factor: float, every_steps: int, schedule: str, warmup_steps: int) -> None:
    """Replace the Trainer's scheduler by lr = base · factor^⌊step / every_steps⌋ (the Trainer's named
    schedules have no step decay). The run's `trainer.schedule` must then be constant without
    warm-up, so no configured schedule is silently dropped."""
    if schedule != "constant" or warmup_steps:
        raise ValueError(f"method.lr_decay replaces the schedule: set trainer.schedule to constant without "
                         f"warm-up, got '{schedule}' with warmup_steps={warmup_steps}")
    if not 0 < factor <= 1 or every_steps < 1:
        raise ValueError(f"lr_decay needs 0 < factor <= 1 and every_steps >= 1, got factor={factor}, "
                         f"every_steps={every_steps}")
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer,
                                                          lambda step: factor ** (step // every_steps))


def dense_checkpoint(path: str | None, url: str | None, sha256_hex: str | None, cache: str | Path) -> Path:
    """The dense network's checkpoint file: `path` as given, or `url` downloaded into `cache` and
    checked against `sha256_hex` (required with a URL; also checked for a path when given)."""
    if path and url:
        raise ValueError(f"dense_checkpoint: give path or url, not both (path={path}, url={url})")
    if url:
        if not sha256_hex:
            raise ValueError(f"dense_checkpoint.url {url} needs its sha256 (dense_checkpoint.sha256)")
        dest = Path(cache) / Path(url.split("?")[0]).name
        if not dest.exists() or sha256(dest) != sha256_hex:
            fetch(url, dest, sha256_hex)
        return dest
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"dense_checkpoint.path {file} is not a file (unzip the official models.zip, "
                         f"or leave dense_checkpoint empty to train the network)")
    if sha256_hex and sha256(file) != sha256_hex:
        raise ValueError(f"dense_checkpoint.path {file} does not match sha256 {sha256_hex}")
    return file


def load_dense(model: nn.Module, file: str | Path) -> nn.Module:
    """Load a state dict into `model` (in place): a plain state dict, or the official checkpoint
    format {'model_state_dict', 'test_accuracy', 'epoch'}. Tensors only (weights_only)."""
    state = torch.load(file, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "model_state_dict" in state:
        state = state["model_state_dict"]
    state = {k.removeprefix("module."): v for k, v in state.items()}     # saved from DataParallel
    missing, unexpected = model.state_dict().keys() - state.keys(), state.keys() - model.state_dict().keys()
    if missing or unexpected:
        raise ValueError(f"checkpoint {file} does not fit {type(model).__name__}: missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}")
    model.load_state_dict(state)
    return model
