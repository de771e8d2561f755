"""Types of `method.*` and `eval.*` values, read from the signatures their `_target_` blocks name.

common/schema.py types the trainer, hardware and logger sections by hand; a method's knobs are too
many and change too often for a second hand-kept schema. Each `_target_: methods.x.Thing` block is
an explicit-argument callable, so its signature already says what each key takes: an annotation
(`int`, `float | None`, `Literal["learned", "none"]`, `tuple[int, ...]`) or, without one, the type of
its default. This module reads those signatures from the source with `ast` (no import: no torch,
no data, well under a second) and refuses a value of the wrong type or an unknown choice with
one paragraph (exit 2), before anything is built. Ranges stay with schema.py's named rules.

It runs at the entry points (scripts/train.py, scripts/reproduce.py before the first run), beside
schema.validate, and `hardware.kernels=triton` is refused there where Triton cannot run.
"""
from __future__ import annotations

import ast
import os
from functools import cache
from pathlib import Path

from common.config import UserError

ROOT = Path(__file__).resolve().parent.parent
_OWN = ("common", "methods")


def _module_source(module: str) -> ast.Module | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return ast.parse(path.read_text())
    return None


@cache
def _definition(target: str, depth: int = 0) -> tuple[ast.FunctionDef | ast.ClassDef, str] | None:
    """(the def/class `target` names, its module), following `from x import name` re-exports."""
    module, _, name = target.rpartition(".")
    tree = _module_source(module) if module.split(".")[0] in _OWN and depth < 5 else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node, module
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _definition(f"{node.module}.{alias.name}", depth + 1)
    return None


def _params(found: tuple, depth: int = 0) -> dict[str, tuple[str | None, object]]:
    """name -> (annotation source or None, default value or Ellipsis when required). A class
    without __init__ or fields takes its first base's (in the repository)."""
    node, module = found
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        fields = {n.target.id: (ast.unparse(n.annotation), _literal(n.value) if n.value else ...)
                  for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        if init is None and not fields and node.bases and depth < 5:
            base = node.bases[0]
            name = ast.unparse(base)
            parent = _definition(name if "." in name and name.split(".")[0] in _OWN else f"{module}.{name}")
            return _params(parent, depth + 1) if parent else {}
        if init is None:   # a dataclass: its annotated fields
            return fields
        node = init
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [...] * (len(positional) - len(args.defaults)) + [_literal(d) for d in args.defaults]
    out = {a.arg: (ast.unparse(a.annotation) if a.annotation else None, d) for a, d in zip(positional, defaults)}
    out |= {a.arg: (ast.unparse(a.annotation) if a.annotation else None, _literal(d) if d else ...)
            for a, d in zip(args.kwonlyargs, args.kw_defaults)}
    out.pop("self", None)
    return out


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None   # a computed default says nothing about the type


def _kinds(annotation: str | None, default) -> tuple[set[str], list | None, bool] | None:
    """(allowed kinds among int/float/bool/str/list/dict, choices, None allowed) or None: unknown."""
    if annotation is None:
        if default is ... or default is None:
            return None
        kind = {bool: "bool", int: "number", float: "number", str: "str", tuple: "list", list: "list",
                dict: "dict"}.get(type(default))
        return ({kind}, None, False) if kind else None
    try:
        tree = ast.parse(annotation, mode="eval").body
    except SyntaxError:
        return None
    return _from_annotation(tree)


def _from_annotation(tree) -> tuple[set[str], list | None, bool] | None:
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.BitOr):
        parts = [_from_annotation(tree.left), _from_annotation(tree.right)]
        if any(p is None for p in parts):
            return None
        kinds = parts[0][0] | parts[1][0]
        choices = (parts[0][1] or []) + (parts[1][1] or []) if (parts[0][1] or parts[1][1]) else None
        return kinds, choices, parts[0][2] or parts[1][2]
    if isinstance(tree, ast.Constant) and tree.value is None:
        return set(), None, True
    name = tree.value.id if isinstance(tree, ast.Subscript) and isinstance(tree.value, ast.Name) else \
        tree.id if isinstance(tree, ast.Name) else None
    if name == "Optional" and isinstance(tree, ast.Subscript):
        inner = _from_annotation(tree.slice)
        return (inner[0], inner[1], True) if inner else None
    if name == "Literal" and isinstance(tree, ast.Subscript):
        items = tree.slice.elts if isinstance(tree.slice, ast.Tuple) else [tree.slice]
        values = [_literal(i) for i in items]
        return {"literal"}, [v for v in values if v is not None], None in values
    simple = {"int": {"int"}, "float": {"number"}, "bool": {"bool"}, "str": {"str"}, "tuple": {"list"},
              "list": {"list"}, "Sequence": {"list"}, "dict": {"dict"}, "Mapping": {"dict"}}
    return (simple[name], None, False) if name in simple else None


def _ok(value, kinds: set[str], choices: list | None, optional: bool) -> bool:
    if value is None:
        return optional
    if choices is not None and value in choices:
        return True
    if choices is not None and not kinds - {"literal"}:
        return False
    if isinstance(value, bool):
        return "bool" in kinds
    if isinstance(value, int):
        return bool(kinds & {"int", "number"})
    if isinstance(value, float):
        return "number" in kinds
    if isinstance(value, str):
        return "str" in kinds
    if isinstance(value, (list, tuple)):
        return "list" in kinds
    if isinstance(value, dict):
        return "dict" in kinds or "_target_" in value
    return True


def _describe(kinds: set[str], choices: list | None, optional: bool) -> str:
    if choices is not None:
        text = "one of " + ", ".join(map(str, choices))
    else:
        names = {"int": "an integer", "number": "a number", "bool": "true or false", "str": "a string",
                 "list": "a list", "dict": "a mapping"}
        text = " or ".join(names[k] for k in sorted(kinds) if k in names)
    return text + (" (or null)" if optional else "")


def check_block(block: dict, prefix: str) -> None:
    """One `_target_` block against its callable's signature (keys the callable does not take are
    tests/test_build.py's business; here the values)."""
    definition = _definition(str(block["_target_"]))
    if definition is None:
        return   # a library's callable (torch.optim.AdamW): its own checks apply
    params = _params(definition)
    for key, value in block.items():
        if key.startswith("_") or key not in params or isinstance(value, dict) and "_target_" in value:
            continue
        kinds = _kinds(*params[key])
        if kinds is None or not (kinds[0] - {"literal"}) and not kinds[1]:
            continue
        if not _ok(value, *kinds):
            raise UserError(f"{prefix}{key} must be {_describe(*kinds)}, got {value!r} (from the signature of "
                            f"{block['_target_']}). Check the value in configs/ or on the command line.",
                            exit_code=2)


def _walk(node, prefix: str) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            check_block(node, prefix)
        for key, value in node.items():
            _walk(value, f"{prefix}{key}.")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _walk(value, f"{prefix}{i}.")


def check_targets(cfg) -> None:
    """Every `_target_` block under `method` and `eval` against its signature; `hardware.kernels`
    against the machine. UserError (exit 2) on the first problem."""
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(cfg, resolve=True)
    for section in ("method", "eval"):
        _walk(resolved.get(section) or {}, f"{section}.")
    check_kernels(resolved.get("hardware") or {})


def check_kernels(hardware: dict) -> None:
    """`kernels: triton` needs the triton package and a CUDA device, or TRITON_INTERPRET=1 (the CPU
    interpreter, for tests). A CUDA device that is asked for but absent is the hardware setup's
    error; here the CPU case, without importing torch."""
    if hardware.get("kernels") != "triton":
        return
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        raise UserError("hardware.kernels=triton needs the triton package (pip install triton); use "
                        "hardware.kernels=auto (Triton where it can run, the reference elsewhere).", exit_code=2)
    interpreting = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if str(hardware.get("device", "cpu")).startswith("cpu") and not interpreting:
        raise UserError(f"hardware.kernels=triton needs a CUDA device; this run uses hardware.device="
                        f"{hardware.get('device')!r}. Use hardware=cuda, or hardware.kernels=auto or reference, or "
                        "set TRITON_INTERPRET=1 to run the Triton kernels on the CPU (slow, for tests).", exit_code=2)
