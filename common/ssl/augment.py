"""Batched, per-sample image augmentations with explicit parameters.

torchvision.transforms.v2 draws one set of parameters per call, so a batch would share a
single crop; contrastive learning needs a different crop per image, and CARE needs to
*choose* the parameters (one pair per chunk) and to know them (the sensitivity probe).
So parameters are sampled as tensors and applied in one `grid_sample` for the whole batch.
Images are float in [0, 1], shape (N, C, H, W).

The colour ops (saturation, hue, grayscale) and the blur follow torchvision.transforms.v2
op by op (tested against it), with three differences. The jitter order is fixed (brightness,
contrast, saturation, hue) where ColorJitter permutes its four ops per call. Contrast blends
with the mean over all channels (torchvision: the mean of the luma) and brightness is not
clamped before it; both are kept so that the grey CPU tiers' draws and outputs stay
bit-identical. On grey (1-channel) images saturation, hue and grayscale are identities, as
in torchvision.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from einops import rearrange


@dataclass(frozen=True)
class Augment:
    """The ranges augmentations are drawn from (SimCLR's, Chen et al. 2020 App. A). The colour
    ops and the blur default to off: the CPU tiers use grey images."""
    min_scale: float = 0.08    # random-resized crop keeps [min_scale, 1] of the area
    flip_prob: float = 0.5     # horizontal flip
    jitter_prob: float = 0.8   # colour jitter (all four ops) applied with this probability ...
    brightness: float = 0.4    # ... factor uniform in [1 - b, 1 + b]
    contrast: float = 0.4
    saturation: float = 0.0    # factor uniform in [max(0, 1 - s), 1 + s], as ColorJitter
    hue: float = 0.0           # shift uniform in [-h, h] turns, h <= 0.5
    grayscale_prob: float = 0.0
    blur_prob: float = 0.0     # Gaussian blur with this probability ...
    blur_kernel: int = 0       # ... odd kernel size in pixels (0 = no blur) ...
    blur_sigma: tuple[float, float] = (0.1, 2.0)   # ... sigma uniform in this range

    def __post_init__(self):
        try:   # YAML gives a list
            object.__setattr__(self, "blur_sigma", tuple(float(s) for s in self.blur_sigma))
        except TypeError:
            raise ValueError(f"Augment.blur_sigma must be (min, max), got {self.blur_sigma!r}") from None
        for name in ("min_scale", "flip_prob", "jitter_prob", "grayscale_prob", "blur_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"Augment.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.min_scale <= 0 or self.brightness < 0 or self.contrast < 0:
            raise ValueError(f"Augment needs min_scale > 0 and brightness, contrast >= 0, got {self}")
        if self.saturation < 0:
            raise ValueError(f"Augment.saturation must be >= 0, got {self.saturation}")
        if not 0.0 <= self.hue <= 0.5:
            raise ValueError(f"Augment.hue must be in [0, 0.5], got {self.hue}")
        if not isinstance(self.blur_kernel, int) or self.blur_kernel < 0 or \
                (self.blur_kernel > 0 and self.blur_kernel % 2 == 0):
            raise ValueError(f"Augment.blur_kernel must be 0 or an odd positive integer, got {self.blur_kernel}")
        if self.blur_prob > 0 and self.blur_kernel == 0:
            raise ValueError(f"Augment.blur_prob = {self.blur_prob} needs a blur_kernel, got 0")
        lo, hi = self.blur_sigma if len(self.blur_sigma) == 2 else (0.0, -1.0)
        if not 0 < lo <= hi:
            raise ValueError(f"Augment.blur_sigma must be (min, max) with 0 < min <= max, got {self.blur_sigma}")


@dataclass
class AugParams:
    """One augmentation per sample; every field has shape (N,). The optional fields are None
    when their op is off (skipped by `apply`)."""
    scale: torch.Tensor      # area fraction kept by the crop
    log_ratio: torch.Tensor  # log aspect ratio of the crop
    cx: torch.Tensor         # crop centre in [-1, 1] units of the free margin
    cy: torch.Tensor
    flip: torch.Tensor       # +1 or -1 (horizontal flip)
    brightness: torch.Tensor  # multiplicative factor
    contrast: torch.Tensor    # factor around the image mean
    saturation: torch.Tensor | None = None   # blend factor with the luma (1 = unchanged)
    hue: torch.Tensor | None = None          # hue shift in turns (0 = unchanged)
    grayscale: torch.Tensor | None = None    # bool: replace by the luma
    blur_sigma: torch.Tensor | None = None   # Gaussian sigma in pixels (0 = not blurred)
    blur_kernel: torch.Tensor | None = None  # odd kernel size in pixels (int)

    def __len__(self) -> int:
        return self.scale.shape[0]

    def _map(self, fn) -> "AugParams":
        return AugParams(**{f.name: None if getattr(self, f.name) is None else fn(getattr(self, f.name))
                            for f in fields(self)})

    def __getitem__(self, index) -> "AugParams":
        """The parameter sets at `index` (an int keeps a length-1 batch)."""
        if isinstance(index, int):
            index = slice(index, index + 1)
        return self._map(lambda t: t[index])

    @staticmethod
    def identity(n: int, device="cpu") -> "AugParams":
        """Parameters that leave images unchanged (full crop, no flip, factors 1)."""
        ones, zeros = torch.ones(n, device=device), torch.zeros(n, device=device)
        return AugParams(scale=ones, log_ratio=zeros, cx=zeros, cy=zeros, flip=ones.clone(),
                         brightness=ones.clone(), contrast=ones.clone())

    def repeat_interleave(self, n: int) -> "AugParams":
        """Each parameter set repeated n times: K sets -> K*n samples (CARE's chunks)."""
        return self._map(lambda t: t.repeat_interleave(n))


def sample_params(n: int, cfg: Augment, device="cpu", generator: torch.Generator | None = None) -> AugParams:
    """Draw n parameter sets from the ranges of an `Augment`. The ops that are off draw nothing,
    and the new ops draw after the old ones, so configs without them keep their random stream."""
    def uniform(lo, hi):
        return lo + (hi - lo) * torch.rand(n, device=device, generator=generator)

    jitter = torch.rand(n, device=device, generator=generator) < cfg.jitter_prob
    brightness = torch.where(jitter, uniform(1 - cfg.brightness, 1 + cfg.brightness), torch.ones(n, device=device))
    contrast = torch.where(jitter, uniform(1 - cfg.contrast, 1 + cfg.contrast), torch.ones(n, device=device))
    flip = torch.where(torch.rand(n, device=device, generator=generator) < cfg.flip_prob, -1.0, 1.0)
    p = AugParams(scale=uniform(cfg.min_scale, 1.0),
                  log_ratio=uniform(math.log(3 / 4), math.log(4 / 3)),
                  cx=uniform(-1.0, 1.0), cy=uniform(-1.0, 1.0), flip=flip,
                  brightness=brightness, contrast=contrast)
    if cfg.saturation > 0:
        p.saturation = torch.where(jitter, uniform(max(0.0, 1 - cfg.saturation), 1 + cfg.saturation),
                                   torch.ones(n, device=device))
    if cfg.hue > 0:
        p.hue = torch.where(jitter, uniform(-cfg.hue, cfg.hue), torch.zeros(n, device=device))
    if cfg.grayscale_prob > 0:
        p.grayscale = torch.rand(n, device=device, generator=generator) < cfg.grayscale_prob
    if cfg.blur_prob > 0:
        on = torch.rand(n, device=device, generator=generator) < cfg.blur_prob
        p.blur_sigma = torch.where(on, uniform(*cfg.blur_sigma), torch.zeros(n, device=device))
        p.blur_kernel = torch.full((n,), cfg.blur_kernel, device=device, dtype=torch.long)
    return p


def luma(images: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) -> (N, 1, H, W): ITU-R 601 luma, torchvision's rgb_to_grayscale weights."""
    r, g, b = images.unbind(dim=1)
    return (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(1)


def _rgb_only(images: torch.Tensor, op: str) -> bool:
    """True for RGB; False for grey (the colour op is an identity); an error otherwise."""
    if images.shape[1] not in (1, 3):
        raise ValueError(f"{op} needs 1 or 3 channels, got {images.shape[1]}")
    return images.shape[1] == 3


def adjust_saturation(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Per-sample factor (N,): blend with the luma, then clamp (torchvision adjust_saturation)."""
    if not _rgb_only(images, "adjust_saturation"):
        return images
    f = factor.view(-1, 1, 1, 1).to(images.dtype)
    return (f * images + (1 - f) * luma(images)).clamp(0.0, 1.0)


def adjust_hue(images: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Per-sample shift (N,) in turns: RGB -> HSV, h += shift mod 1, -> RGB (torchvision adjust_hue).
    Samples with shift 0 come back unchanged (the round trip is not exact in float)."""
    if not _rgb_only(images, "adjust_hue"):
        return images
    maxc, minc = images.amax(dim=1), images.amin(dim=1)                 # (N, H, W)
    delta = maxc - minc
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))       # h, s are 0 where delta = 0
    r, g, b = images.unbind(dim=1)
    h = torch.where(maxc == r, (g - b) / safe, torch.where(maxc == g, 2 + (b - r) / safe, 4 + (r - g) / safe))
    h = torch.where(delta > 0, h, torch.zeros_like(h))
    h = (h / 6 + shift.view(-1, 1, 1).to(images.dtype)).remainder(1.0)
    s = delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc))
    # HSV -> RGB in closed form: channel = v - v s clamp(min(k, 4 - k), 0, 1), k = (n + 6h) mod 6
    k = (torch.tensor([5.0, 3.0, 1.0], dtype=images.dtype, device=images.device).view(1, 3, 1, 1)
         + 6 * h.unsqueeze(1)).remainder(6.0)
    v, s = maxc.unsqueeze(1), s.unsqueeze(1)
    out = v - v * s * torch.minimum(k, 4 - k).clamp(0.0, 1.0)
    return torch.where(shift.view(-1, 1, 1, 1) != 0, out, images)


def grayscale(images: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
    """Per-sample bool (N,): replace by the luma on every channel (torchvision rgb_to_grayscale with
    num_output_channels = C)."""
    if not _rgb_only(images, "grayscale"):
        return images
    return torch.where(on.view(-1, 1, 1, 1), luma(images).expand_as(images), images)


def autocast_off(device_type: str):
    """A context that switches autocast off where it is on; a no-op elsewhere (torch refuses to
    query or disable autocast on devices without it, such as meta)."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except RuntimeError:
        enabled = False
    return torch.autocast(device_type, enabled=False) if enabled else nullcontext()


def gaussian_blur(images: torch.Tensor, sigma: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Per-sample sigma (N,) (0 = not blurred) and odd kernel size (N,): torchvision gaussian_blur
    (separable kernel exp(-x²/2σ²) normalised, reflect padding). Kernels of different sizes are
    zero-padded to the largest, which changes no output (the reflected pixels a tap reads do not
    depend on the padding width). The whole batch goes through one grouped convolution (rows with
    σ = 0 are returned as they are): no boolean indexing, so one host sync (the largest kernel size).
    Computed in the images' dtype with autocast off: under autocast the convolution would come back
    in bf16/fp16."""
    n, c, h, w = images.shape
    half = int(kernel.max()) // 2
    if half == 0:
        return images
    if half >= min(h, w):
        raise ValueError(f"gaussian_blur kernel {2 * half + 1} needs images larger than {h}x{w}")
    on = sigma > 0
    with autocast_off(images.device.type):
        taps = torch.arange(-half, half + 1, dtype=images.dtype, device=images.device)
        s = torch.where(on, sigma, torch.ones_like(sigma)).to(images.dtype)[:, None]   # no 0/0 for σ = 0 rows
        weight = torch.exp(-0.5 * (taps / s) ** 2) * (taps.abs() <= (kernel[:, None] // 2))       # (N, K)
        weight = (weight / weight.sum(dim=1, keepdim=True)).repeat_interleave(c, dim=0)           # (N c, K)
        y = F.pad(images.reshape(1, n * c, h, w), (half, half, half, half), mode="reflect")
        y = F.conv2d(y, weight.view(n * c, 1, 1, -1), groups=n * c)        # along W
        y = F.conv2d(y, weight.view(n * c, 1, -1, 1), groups=n * c)        # along H
    return torch.where(on.view(-1, 1, 1, 1), y.view(n, c, h, w), images)


def apply(images: torch.Tensor, p: AugParams) -> torch.Tensor:
    """Random-resized crop + flip (one affine grid_sample), then brightness and contrast, then
    (where set) saturation, hue, grayscale and blur."""
    n = images.shape[0]
    ratio = p.log_ratio.exp()
    # crop half-extents in normalised coordinates, never larger than the image
    sx = (p.scale * ratio).sqrt().clamp(max=1.0)
    sy = (p.scale / ratio).sqrt().clamp(max=1.0)
    theta = torch.zeros(n, 2, 3, device=images.device, dtype=images.dtype)
    theta[:, 0, 0] = sx * p.flip
    theta[:, 1, 1] = sy
    theta[:, 0, 2] = p.cx * (1 - sx)
    theta[:, 1, 2] = p.cy * (1 - sy)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    out = F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    out = out * p.brightness.view(n, 1, 1, 1)
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    out = (out - mean) * p.contrast.view(n, 1, 1, 1) + mean
    out = out.clamp(0.0, 1.0)
    if p.saturation is not None:
        out = adjust_saturation(out, p.saturation)
    if p.hue is not None:
        out = adjust_hue(out, p.hue)
    if p.grayscale is not None:
        out = grayscale(out, p.grayscale)
    if p.blur_sigma is not None:
        out = gaussian_blur(out, p.blur_sigma, p.blur_kernel)
    return out


def two_views(images: torch.Tensor, cfg: Augment) -> tuple[torch.Tensor, torch.Tensor]:
    """The SimCLR pair: two independent augmentations of every image."""
    n = images.shape[0]
    return (apply(images, sample_params(n, cfg, images.device)),
            apply(images, sample_params(n, cfg, images.device)))


def multi_views(images: torch.Tensor, views: int, cfg: Augment,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """M independent augmentations of every image: float (N, C, H, W) -> (N, M, C, H, W).

    One parameter set per view (N*M draws from the ranges of `cfg`) and one `apply` over all
    N*M views (poly-view contrastive learning). M = 2 is `two_views` in distribution.
    """
    if views < 1:
        raise ValueError(f"multi_views needs views >= 1, got {views}")
    n = images.shape[0]
    params = sample_params(n * views, cfg, images.device, generator=generator)
    out = apply(images.repeat_interleave(views, dim=0), params)           # ((N M), C, H, W), sample-major
    return rearrange(out, "(n m) c h w -> n m c h w", n=n, m=views)
