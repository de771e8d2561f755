"""common.ssl.augment's colour ops and blur: each against torchvision.transforms.v2.functional image
by image, the draws and outputs of configs without them pinned to the implementation the recorded
CPU tables ran on, and the range checks."""
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF

from common.ssl import Augment, AugParams, apply, sample_params
from common.ssl.augment import adjust_hue, adjust_saturation, gaussian_blur, grayscale

COLOUR = Augment(min_scale=0.08, jitter_prob=0.8, brightness=0.8, contrast=0.8, saturation=0.8, hue=0.2,
                 grayscale_prob=0.2, blur_prob=0.5, blur_kernel=7)


def frozen_sample(n, cfg, generator):
    """sample_params as it was before the colour ops (commit 07c3b23), copied: the reference stream."""
    def uniform(lo, hi):
        return lo + (hi - lo) * torch.rand(n, generator=generator)
    jitter = torch.rand(n, generator=generator) < cfg.jitter_prob
    brightness = torch.where(jitter, uniform(1 - cfg.brightness, 1 + cfg.brightness), torch.ones(n))
    contrast = torch.where(jitter, uniform(1 - cfg.contrast, 1 + cfg.contrast), torch.ones(n))
    flip = torch.where(torch.rand(n, generator=generator) < cfg.flip_prob, -1.0, 1.0)
    return dict(scale=uniform(cfg.min_scale, 1.0), log_ratio=uniform(math.log(3 / 4), math.log(4 / 3)),
                cx=uniform(-1.0, 1.0), cy=uniform(-1.0, 1.0), flip=flip, brightness=brightness, contrast=contrast)


def frozen_apply(images, p):
    """apply as it was before the colour ops (commit 07c3b23), copied."""
    n = images.shape[0]
    ratio = p["log_ratio"].exp()
    sx, sy = (p["scale"] * ratio).sqrt().clamp(max=1.0), (p["scale"] / ratio).sqrt().clamp(max=1.0)
    theta = torch.zeros(n, 2, 3, dtype=images.dtype)
    theta[:, 0, 0], theta[:, 1, 1] = sx * p["flip"], sy
    theta[:, 0, 2], theta[:, 1, 2] = p["cx"] * (1 - sx), p["cy"] * (1 - sy)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    out = F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    out = out * p["brightness"].view(n, 1, 1, 1)
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    return ((out - mean) * p["contrast"].view(n, 1, 1, 1) + mean).clamp(0.0, 1.0)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("cfg", [Augment(), Augment(min_scale=0.3, brightness=0.4, contrast=0.4)])
def test_without_the_new_ops_draws_and_outputs_are_bit_identical(channels, cfg):
    x = torch.rand(16, channels, 20, 20, generator=torch.Generator().manual_seed(1))
    p = sample_params(16, cfg, generator=torch.Generator().manual_seed(7))
    ref = frozen_sample(16, cfg, torch.Generator().manual_seed(7))
    assert all(torch.equal(getattr(p, k), v) for k, v in ref.items())
    assert p.saturation is p.hue is p.grayscale is p.blur_sigma is p.blur_kernel is None
    assert torch.equal(apply(x, p), frozen_apply(x, ref))
    # the new ops draw after the old ones: switching them on keeps the old fields' values
    q = sample_params(16, replace(cfg, saturation=0.4, hue=0.1, grayscale_prob=0.2, blur_prob=0.5, blur_kernel=3),
                      generator=torch.Generator().manual_seed(7))
    assert all(torch.equal(getattr(q, k), v) for k, v in ref.items())


def test_each_op_matches_torchvision_image_by_image():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 17, 23, generator=g)
    x[0, :, :4] = 0.5   # grey pixels: hue and saturation undefined, must stay put
    factor, shift = torch.tensor([0.0, 0.3, 1.0, 1.7, 0.9, 1.2]), torch.tensor([-0.5, -0.2, 0.0, 0.05, 0.3, 0.5])
    sigma, kernel = torch.tensor([0.1, 0.7, 2.0, 0.0, 1.3, 3.0]), torch.tensor([3, 5, 7, 7, 9, 1])
    on = torch.tensor([True, False, True, False, True, True])
    sat, hue, grey, blur = adjust_saturation(x, factor), adjust_hue(x, shift), grayscale(x, on), \
        gaussian_blur(x, sigma, kernel)
    for i in range(6):
        xi = x[i]
        assert torch.allclose(sat[i], TF.adjust_saturation(xi, float(factor[i])), atol=1e-6)
        assert torch.allclose(hue[i], TF.adjust_hue(xi, float(shift[i])), atol=1e-5)
        assert torch.allclose(grey[i], TF.rgb_to_grayscale(xi, 3) if on[i] else xi, atol=1e-6)
        want = xi if sigma[i] == 0 else TF.gaussian_blur(xi, [int(kernel[i])] * 2, [float(sigma[i])] * 2)
        assert torch.allclose(blur[i], want, atol=1e-6)


def test_colour_ops_are_identities_on_grey_images_and_refuse_other_channel_counts():
    x = torch.rand(4, 1, 8, 8)
    p = sample_params(4, COLOUR, generator=torch.Generator().manual_seed(0))
    p.blur_sigma.zero_()
    assert torch.equal(apply(x, p), apply(x, replace(p, saturation=None, hue=None, grayscale=None)))
    with pytest.raises(ValueError, match="got 2"):
        adjust_hue(torch.rand(4, 2, 8, 8), torch.full((4,), 0.1))


def test_sampled_ranges_gate_and_slicing():
    n = 4000
    p = sample_params(n, COLOUR, generator=torch.Generator().manual_seed(3))
    jitter = p.brightness != 1
    assert torch.equal(p.saturation != 1, jitter) and torch.equal(p.hue != 0, jitter)   # one jitter gate
    assert p.saturation.min() >= 0.2 and p.saturation.max() <= 1.8 and p.hue.abs().max() <= 0.2
    assert abs(jitter.float().mean() - 0.8) < 4 * math.sqrt(0.16 / n)
    assert abs(p.grayscale.float().mean() - 0.2) < 4 * math.sqrt(0.16 / n)
    blurred = p.blur_sigma > 0
    assert abs(blurred.float().mean() - 0.5) < 4 * math.sqrt(0.25 / n)
    assert p.blur_sigma[blurred].min() >= 0.1 and p.blur_sigma.max() <= 2.0 and (p.blur_kernel == 7).all()
    assert len(p[3]) == 1 and torch.equal(p.repeat_interleave(2).hue[:2], p.hue[0].repeat(2))
    assert AugParams.identity(2).hue is None
    out = apply(torch.rand(64, 3, 16, 16), p[:64])
    assert out.shape == (64, 3, 16, 16) and out.min() >= 0 and out.max() <= 1


@pytest.mark.parametrize("bad, match", [
    (dict(saturation=-0.1), "saturation.*-0.1"), (dict(hue=0.6), "hue.*0.6"),
    (dict(grayscale_prob=1.5), "grayscale_prob.*1.5"), (dict(blur_prob=-1.0), "blur_prob.*-1.0"),
    (dict(blur_kernel=4), "blur_kernel.*4"), (dict(blur_prob=0.5), "blur_prob = 0.5 needs a blur_kernel"),
    (dict(blur_sigma=(0.0, 2.0)), r"blur_sigma.*\(0.0, 2.0\)"), (dict(blur_sigma=(2.0, 1.0)), "blur_sigma"),
    (dict(blur_sigma=1.5), r"blur_sigma must be \(min, max\), got 1.5")])
def test_augment_refuses_bad_colour_and_blur_settings(bad, match):
    with pytest.raises(ValueError, match=match):
        Augment(**bad)


def test_blur_kernel_larger_than_the_image_is_an_error():
    with pytest.raises(ValueError, match="kernel 9"):
        gaussian_blur(torch.rand(1, 3, 4, 4), torch.tensor([1.0]), torch.tensor([9]))


def test_blur_runs_in_the_images_dtype_under_autocast_and_keeps_unblurred_rows_exactly():
    """Under bf16 autocast (hardware=cuda's default) the convolution would return bf16, which cannot
    be written back into float32 images; the blur switches autocast off and returns the float32
    result it gives without autocast. Rows with sigma 0 come back bit for bit."""
    g = torch.Generator().manual_seed(4)
    x = torch.rand(5, 3, 16, 16, generator=g)
    sigma, kernel = torch.tensor([0.0, 1.3, 0.0, 0.4, 2.0]), torch.full((5,), 7)
    plain = gaussian_blur(x, sigma, kernel)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = gaussian_blur(x, sigma, kernel)
        p = sample_params(5, COLOUR, generator=torch.Generator().manual_seed(5))
        views = apply(x, p)
    assert auto.dtype == torch.float32 and torch.equal(auto, plain) and views.dtype == torch.float32
    assert torch.equal(plain[0], x[0]) and torch.equal(plain[2], x[2]) and not torch.equal(plain[1], x[1])
    assert gaussian_blur(x, torch.zeros(5), torch.full((5,), 1)) is x                  # kernel 1: nothing to do
