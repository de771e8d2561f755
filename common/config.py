"""Config helpers: one error type for bad input, choice checks, and claim evaluation.

Every user-facing mistake (unknown method, missing dataset, corrupt checkpoint) raises
`UserError`; `scripts/*.py` turn it into a one-paragraph message and a non-zero exit
instead of a traceback (unless `debug=true`).
"""
from __future__ import annotations

import ast
import operator
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
CHOICE_GROUPS = ("method", "dataset", "trainer", "eval", "hardware", "logger", "experiment")


class UserError(Exception):
    """A mistake in what the user asked for; `exit_code` 2 for bad choices, 1 otherwise."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def choices(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in (config_dir / group).glob("*.yaml"))


def check_choices(overrides: list[str], config_dir: Path = CONFIG_DIR) -> None:
    """Fail early, listing what exists, when a config-group override names nothing.

    Hydra's own message for this is long and exits 1; the contract here is exit 2.
    """
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in CHOICE_GROUPS or value in ("null", ""):
            continue
        available = choices(key, config_dir)
        for one in value.split(","):  # a -m sweep over choices
            if one not in available:
                raise UserError(
                    f"unknown {key} '{one}'. Available {key} choices: {', '.join(available)}.",
                    exit_code=2,
                )


def _first_of_sweeps(overrides: list[str]) -> list:
    """Hydra's parsed overrides, a -m sweep (`seed=0,1`) reduced to its first value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as err:  # Hydra's grammar errors: a short message is enough
        raise UserError(f"cannot parse the overrides {overrides}: {str(err).splitlines()[0]}", exit_code=2)
    out = []
    for o in parsed:
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()))
            out.append((o, f"{o.get_key_element()}={first}"))
        else:
            out.append((o, o.input_line))
    return out


def compose_checked(overrides: list[str], config_name: str = "train", config_dir: Path = CONFIG_DIR):
    """The config `scripts/train.py` would see, or one `UserError` (exit 2) that names what is
    wrong: an unknown choice, a key no config declares (with the nearest existing keys), or a
    value of the wrong type or range (common.schema)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from common.schema import flat_keys, nearest, validate

    check_choices(overrides, config_dir)
    parsed = _first_of_sweeps(overrides)
    groups = [line for o, line in parsed
              if "/" in o.key_or_group or o.key_or_group in CHOICE_GROUPS or o.key_or_group.startswith("hydra")]
    values = [(o, line) for o, line in parsed if line not in groups]
    try:
        with initialize_config_dir(str(config_dir), version_base="1.3"):
            base = compose(config_name, overrides=groups)
            keys = flat_keys(OmegaConf.to_container(base, resolve=False))
            for o, line in values:
                key = o.key_or_group
                if o.is_add() or o.is_delete() or key.startswith("hydra"):
                    continue
                if key not in keys and not any(k.startswith(key + ".") for k in keys):
                    near = nearest(key, keys)
                    hint = f" Nearest existing keys: {', '.join(near)}." if near else ""
                    raise UserError(f"unknown key '{key}' in the override '{line}'.{hint} Every key of "
                                    f"this run: python scripts/train.py {' '.join(groups)} --cfg job", exit_code=2)
            cfg = compose(config_name, overrides=[line for _, line in parsed])
    except HydraException as err:
        text = str(err).strip().splitlines()[0]
        if "You must specify 'method'" in text:
            text = f"no method chosen: add method=<name>. Available methods: {', '.join(choices('method'))}"
        raise UserError(text, exit_code=2) from err
    validate(cfg)
    return cfg


# --- claims --------------------------------------------------------------------------
# Claims are strings in experiment configs such as "care.wahba_error < simclr.wahba_error".
# They are evaluated on the mean of each row's metric over seeds with a tiny whitelist
# evaluator, never with eval().
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
           ast.GtE: operator.ge}


def evaluate_claim(claim: str, table: dict[str, dict[str, float]]) -> tuple[bool, str]:
    """Evaluate `claim` against `table[row][metric]`; return (holds, claim with numbers filled in)."""
    tree = ast.parse(claim, mode="eval").body
    filled: list[str] = []

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            row, metric = node.value.id, node.attr
            if row not in table or metric not in table[row]:
                raise UserError(f"claim '{claim}' names {row}.{metric}, which no run reported; "
                                f"rows: {sorted(table)}")
            return table[row][metric]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "abs"
                and len(node.args) == 1 and not node.keywords):
            return abs(value(node.args[0]))
        raise UserError(f"claim '{claim}': only row.metric names, numbers, + - * /, abs() and "
                        f"comparisons are allowed")

    if not isinstance(tree, ast.Compare):
        raise UserError(f"claim '{claim}' is not a comparison")
    left = value(tree.left)
    holds = True
    filled.append(f"{left:.4g}")
    for op, right_node in zip(tree.ops, tree.comparators):
        if type(op) not in _CMPOPS:
            raise UserError(f"claim '{claim}': comparison {type(op).__name__} not allowed")
        right = value(right_node)
        holds = holds and _CMPOPS[type(op)](left, right)
        filled.append({ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}[type(op)])
        filled.append(f"{right:.4g}")
        left = right
    return holds, " ".join(filled)
