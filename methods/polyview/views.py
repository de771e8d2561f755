"""The compute-matched batch of the poly-view tables (the views themselves come from
common.ssl.multi_views, beside two_views)."""
from __future__ import annotations


def images_per_step(encoded_views: int, views: int) -> int:
    """Unique images per step N when every step encodes `encoded_views` = N*M views (the
    fixed compute budget of the paper's second finding: fewer samples, more views)."""
    if views < 2:
        raise ValueError(f"poly-view training needs views >= 2, got {views}")
    if encoded_views % views:
        raise ValueError(f"encoded views per step ({encoded_views}) must be a multiple of views ({views})")
    return encoded_views // views
