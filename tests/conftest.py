import copy
import functools
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("WANDB_MODE", "offline")
# one thread per pytest-xdist worker (two workers on two cores), else at most two
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, torch.get_num_threads()))


def has_fashion_mnist() -> bool:
    from common.data.images import FASHION_SYSTEM

    return (FASHION_SYSTEM / "train-images-idx3-ubyte.gz").exists() or \
        (ROOT / "data/FashionMNIST/raw/train-images-idx3-ubyte.gz").exists()


needs_fashion = pytest.mark.skipif(not has_fashion_mnist(),
                                   reason="Fashion-MNIST not on this machine (apt-get install dataset-fashion-mnist)")


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]):
    from hydra import compose, initialize_config_dir

    from common.config import CONFIG_DIR

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.fixture
def compose_cfg():
    """compose(overrides) -> the config scripts/train.py would see. Composed once per worker and
    overrides (several tests walk every experiment config), handed out as a copy a test may edit."""
    return lambda overrides: copy.deepcopy(_composed(tuple(overrides)))
