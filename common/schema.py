"""Typed schemas of what a run reads, checked before anything is built (DESIGN.md section 4).

Each section of the composed config has a dataclass here; a field's metadata says its type,
range and choices. `validate(cfg)` walks the sections and raises one `UserError` (exit 2)
naming the key, the value, what is allowed and the nearest existing keys. Hydra's struct
mode already refuses keys that no YAML file declares; these schemas add types and ranges,
and refuse keys in the strict sections (top level, trainer, hardware, logger) that the code
does not know.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from common.config import UserError

SCHEDULES = ("cosine", "constant", "inverse_sqrt", "linear")
PRECISIONS = ("fp32", "bf16", "fp16")
KERNELS = ("reference", "triton", "auto")


def spec(kind: type | tuple = float, *, ge=None, gt=None, le=None, lt=None, choices=None,
         optional: bool = False, default: Any = MISSING, pattern: str | None = None):
    """A schema field: `kind` (int, float, str, bool, dict, list), bounds, choices, None allowed."""
    meta = dict(kind=kind, ge=ge, gt=gt, le=le, lt=lt, choices=choices, optional=optional, pattern=pattern)
    return field(default=default, metadata=meta)


def _describe(meta: dict) -> str:
    kind = meta["kind"]
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             dict: "a mapping", list: "a list"}
    text = " or ".join(names[k] for k in kind) if isinstance(kind, tuple) else names[kind]
    bounds = [f"{op} {v}" for op, v in ((">=", meta["ge"]), (">", meta["gt"]), ("<=", meta["le"]),
                                        ("<", meta["lt"])) if v is not None]
    if bounds:
        text += " " + " and ".join(bounds)
    if meta["choices"]:
        text = "one of " + ", ".join(map(str, meta["choices"]))
    if meta["pattern"]:
        text += f" matching {meta['pattern']}"
    return text + (" (or null)" if meta["optional"] else "")


def _type_ok(value, kind) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is bool and isinstance(value, bool):
            return True
        if k is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if k is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if k is str and isinstance(value, str):
            return True
        if k is dict and isinstance(value, (dict, DictConfig)):
            return True
        if k is list and isinstance(value, (list, tuple, ListConfig)):
            return True
    return False


def check_value(key: str, value, meta: dict) -> str | None:
    """None when `value` fits `meta`, else what is wrong, as the start of an error message."""
    if value is None:
        return None if meta["optional"] else f"{key} must be {_describe(meta)}, got null"
    bad = f"{key} must be {_describe(meta)}, got {value!r}"
    if not _type_ok(value, meta["kind"]):
        return bad + f" ({type(value).__name__})"
    if meta["choices"] and value not in meta["choices"]:
        return bad
    if meta["pattern"] and not re.fullmatch(meta["pattern"], str(value)):
        return bad
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for op, bound in (("ge", meta["ge"]), ("gt", meta["gt"]), ("le", meta["le"]), ("lt", meta["lt"])):
            if bound is not None and not {"ge": value >= bound, "gt": value > bound,
                                          "le": value <= bound, "lt": value < bound}[op]:
                return bad
    return None


@dataclass
class OptimizerSchema:
    """`_target_` plus the optimizer's own keyword arguments (any others pass through)."""
    _target_: str = spec(str)
    lr: float = spec(float, gt=0)
    weight_decay: float = spec(float, ge=0, optional=True)
    momentum: float = spec(float, ge=0, le=1, optional=True)
    extra_allowed = True


@dataclass
class ScheduleSchema:
    name: str = spec(str, choices=SCHEDULES)
    warmup_steps: int = spec(int, ge=0)
    t0: float = spec(float, gt=0, optional=True)
    extra_allowed = False


@dataclass
class TrainerSchema:
    max_steps: int = spec(int, ge=0)
    epochs: int = spec(int, ge=1)          # a method's own loop over its data (blockwise: BESA)
    batch_size: int = spec(int, ge=1)
    grad_accum: int = spec(int, ge=1)
    clip_grad: float = spec(float, gt=0, optional=True)
    optimizer: dict = spec(dict)
    schedule: dict = spec(dict)
    log_every: int = spec(int, ge=1)
    eval_every: int = spec(int, ge=0)
    ckpt_every: int = spec(int, ge=0)
    progress: bool = spec(bool)
    extra_allowed = False


@dataclass
class HardwareSchema:
    device: str = spec(str, pattern=r"cpu|cuda(:\d+)?|auto")
    precision: str = spec(str, choices=PRECISIONS)
    compile: bool = spec(bool)
    kernels: str = spec(str, choices=KERNELS)
    ddp: bool = spec(bool)
    deterministic: bool = spec(bool)
    threads: int = spec(int, ge=1, optional=True)
    extra_allowed = False


@dataclass
class LoggerSchema:
    kind: str = spec(str, choices=("jsonl", "wandb", "none"))
    project: str = spec(str, optional=True, default=None)
    mode: str = spec(str, choices=("offline", "online", "disabled"), optional=True, default=None)
    extra_allowed = False


@dataclass
class DatasetSchema:
    """Keys every loader shares; dataset-specific keys pass through (struct mode still refuses
    a key that the dataset's YAML file does not declare)."""
    name: str = spec(str)
    root: str = spec(str)
    download: bool = spec(bool)
    train_size: int = spec(int, ge=1, optional=True, default=None)
    eval_train_size: int = spec(int, ge=1, optional=True, default=None)
    test_size: int = spec(int, ge=1, optional=True, default=None)
    in_chans: int = spec(int, ge=1, default=None, optional=True)
    img_size: int = spec(int, ge=1, default=None, optional=True)
    num_classes: int = spec(int, ge=2, default=None, optional=True)
    extra_allowed = True


@dataclass
class TopSchema:
    seed: int = spec(int, ge=0)
    resume: bool = spec(bool)
    debug: bool = spec(bool)
    run_name: str = spec(str)
    run_dir: str = spec(str)
    paths: dict = spec(dict)
    method: dict = spec(dict)
    dataset: dict = spec(dict)
    trainer: dict = spec(dict)
    eval: dict = spec(dict)
    hardware: dict = spec(dict)
    logger: dict = spec(dict)
    paper: dict = spec(dict, optional=True)
    claims: list = spec(list)
    known_failures: list = spec(list)
    tuned_on: dict = spec(dict, optional=True)
    table: dict = spec(dict, optional=True)
    extra_allowed = False


# Keys by name anywhere under `method` and `eval`: a convention, so a new paper's knobs are
# checked without a schema of their own (a value that is not a plain number is left alone).
NAMED_RULES = [
    (r"(.*_)?(prob|probability|dropout|sparsity|fraction|ratio_kept|momentum|ema_decay)", dict(ge=0, le=1)),
    (r"(.*_)?(lr|temperature|tau|epsilon|eps)", dict(gt=0)),
    (r"(.*_)?(seed|steps|epochs|warmup_steps)", dict(ge=0, integer=True)),
    (r"(num_.*|.*_dim|depth|heads|width|batch_size|hidden|k|max_iter)", dict(ge=1, integer=True)),
]


def _named_rule(key: str, value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    leaf = key.rsplit(".", 1)[-1]
    for pattern, rule in NAMED_RULES:
        if re.fullmatch(pattern, leaf):
            if rule.get("integer") and not isinstance(value, int):
                return f"{key} must be an integer, got {value!r}"
            if "ge" in rule and value < rule["ge"] or "le" in rule and value > rule["le"] \
                    or "gt" in rule and value <= rule["gt"]:
                bounds = " and ".join(f"{op} {rule[k]}" for k, op in (("ge", ">="), ("gt", ">"), ("le", "<="))
                                      if k in rule)
                return f"{key} must be {bounds}, got {value!r}"
            return None
    return None


def flat_keys(cfg, prefix: str = "") -> list[str]:
    """Every leaf key of a config, dotted ('trainer.optimizer.lr')."""
    out = []
    items = cfg.items() if isinstance(cfg, (dict, DictConfig)) else []
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, (dict, DictConfig)) and len(v):
            out += flat_keys(v, key + ".")
        else:
            out.append(key)
    return out


def nearest(key: str, keys: list[str], n: int = 3) -> list[str]:
    """Closest existing keys to a misspelt one, by its last part first (`trainer.lrr` ->
    `trainer.optimizer.lr`), then by the whole dotted key."""
    leaf = key.rsplit(".", 1)[-1]

    def score(k: str) -> tuple[float, float]:
        return (difflib.SequenceMatcher(None, leaf, k.rsplit(".", 1)[-1]).ratio(),
                difflib.SequenceMatcher(None, key, k).ratio())

    ranked = sorted(keys, key=score, reverse=True)
    return [k for k in ranked if max(score(k)) > 0.6][:n]


def _fail(message: str, all_keys: list[str] | None = None, key: str | None = None):
    if all_keys is not None and key is not None:
        near = nearest(key, all_keys)
        if near:
            message += f". Nearest existing keys: {', '.join(near)}"
    raise UserError(message + ".", exit_code=2)


def _check_section(section, schema, prefix: str, all_keys: list[str], required: bool = False) -> None:
    known = {f.name: f for f in fields(schema)}
    for name, f in known.items():
        if name not in section:
            # a recipe may leave out what its loop does not read (BESA's own loop); the
            # top level must have everything
            if required:
                _fail(f"{prefix}{name} is missing; it must be {_describe(f.metadata)}")
            continue
        problem = check_value(prefix + name, section[name], f.metadata)
        if problem:
            _fail(problem)
    if not getattr(schema, "extra_allowed", False):
        for name in section:
            if name not in known:
                _fail(f"unknown key {prefix}{name}", all_keys, prefix + name)


def validate(cfg: DictConfig) -> None:
    """Types, ranges and choices of everything a run reads; UserError(exit 2) on the first problem."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    all_keys = flat_keys(resolved)
    _check_section(resolved, TopSchema, "", all_keys, required=True)
    for name, schema in (("trainer", TrainerSchema), ("hardware", HardwareSchema), ("logger", LoggerSchema),
                         ("dataset", DatasetSchema)):
        _check_section(resolved[name], schema, name + ".", all_keys)
    trainer = resolved["trainer"]
    if trainer.get("optimizer") is not None:
        _check_section(trainer["optimizer"], OptimizerSchema, "trainer.optimizer.", all_keys)
    if trainer.get("schedule") is not None:
        _check_section(trainer["schedule"], ScheduleSchema, "trainer.schedule.", all_keys)
    for section in ("method", "eval"):
        for key in flat_keys(resolved[section], section + "."):
            value = OmegaConf.select(OmegaConf.create(resolved), key)
            problem = _named_rule(key, value)
            if problem:
                _fail(problem)
