"""SimCLR (Chen et al., ICML 2020): encoder + projector trained with NT-Xent on two views.

The model is common.ssl.ContrastiveModel unchanged (CARE and NCL subclass it); this
module names it for readers of this folder.
"""
from common.ssl import ContrastiveModel


class SimCLR(ContrastiveModel):
    """L = NT-Xent(z1, z2; tau) over two augmented views of each image."""
