"""Objects from config: every `_target_` block of every method/experiment config names a callable
that accepts exactly its keys, and every method's model builds from its config on the meta device."""
import importlib
import inspect

import pytest
import torch
from hydra.utils import get_object
from omegaconf import OmegaConf

from common.config import choices
from common.reproduce.paper import build_on_meta


def target_blocks(node, path="") -> list[tuple[str, dict]]:
    out = []
    if isinstance(node, dict):
        if "_target_" in node:
            out.append((path, node))
        for k, v in node.items():
            out += target_blocks(v, f"{path}.{k}" if path else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += target_blocks(v, f"{path}[{i}]")
    return out


@pytest.mark.parametrize("experiment", choices("experiment"))
def test_every_target_block_binds_to_its_callable(compose_cfg, experiment):
    cfg = OmegaConf.to_container(compose_cfg([f"experiment={experiment}"]), resolve=True)
    for path, block in target_blocks(cfg):
        target = get_object(block["_target_"])
        kwargs = {k: v for k, v in block.items() if not k.startswith("_")}
        try:
            inspect.signature(target).bind_partial(**kwargs)
        except TypeError as err:
            pytest.fail(f"{experiment}: {path} = {block['_target_']}({sorted(kwargs)}): {err}")


@pytest.mark.parametrize("method", choices("method"))
def test_model_builds_from_the_method_config_on_the_meta_device(compose_cfg, method):
    module = importlib.import_module(f"methods.{method}")
    if not hasattr(module, "build"):
        pytest.skip(f"{method} trains no model of its own (build(cfg) is for methods that do)")
    if getattr(module, "TRAINS_NO_NETWORK", False):
        pytest.skip(f"{method}'s build(cfg) makes a synthetic task, not a network")
    model, count = build_on_meta(compose_cfg([f"method={method}"]))
    assert count > 0 and all(p.device == torch.device("meta") for p in model.parameters())
