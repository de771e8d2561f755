"""Claims judged beyond seed noise (DESIGN.md section 4).

A claim is a comparison of row metrics, e.g. "care.wahba_error < simclr.wahba_error" or
"vol.importance_corr > 0.95", evaluated with a whitelist (never eval()). Rows of a table share
seeds, so each claim's margin is computed per seed (paired) and summarised by its mean and a
paired t-interval at 95%:

    margin_s = lhs_s - rhs_s  for > and >=,   rhs_s - lhs_s  for < and <=
    PASS          the interval lies above 0 (for >= / <=: the margin is never below 0 and its
                  interval does not reach below 0)
    WITHIN NOISE  the mean margin holds, its interval does not clear 0
    FAIL          the mean margin does not hold
A chained comparison (a < b < c) gets the worst status of its links.

A claim is evidence only if a method that learned nothing would fail it (DESIGN.md section 4).
A table names, per row, the naive rows that stand in for it (`table.controls: {transformer:
[ridge, zero]}`); each claim naming a controlled row is judged again with that row replaced by each
control, on the same seeds. A claim that PASSes while some control version PASSes too is
NOT DISCRIMINATING, which `--check` treats as a failure. A claim may name its own stand-ins
(`controls: {transformer: [zero]}` in its entry): for the rows it names they replace the table's,
so one claim can be held to a naive row that would be meaningless for another claim of that row.
"""
from __future__ import annotations

import ast
import math
import operator
from dataclasses import asdict, dataclass, field

import numpy as np

from common.config import UserError

PASS, NOISE, FAIL = "PASS", "WITHIN NOISE", "FAIL"
NOT_DISCRIMINATING = "NOT DISCRIMINATING"
_ORDER = {PASS: 0, NOISE: 1, FAIL: 2}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
MIN_SEEDS = 3
MOST_SEEDS = 50     # seeds_needed searches up to this many, then says MOST_SEEDS + 1


@dataclass
class ClaimResult:
    claim: str
    status: str                 # PASS | WITHIN NOISE | FAIL
    margin: float               # mean paired margin (> 0: the claim holds on the mean)
    low: float                  # 95% paired t-interval of the margin
    high: float
    values: str                 # the claim with the means filled in
    per_seed: list[float]       # margins per seed, in the table's seed order
    seeds_needed: int | None    # seeds for PASS if the margin and spread stay as measured
    why: str | None = None      # known failures: the reason (placeholders filled from this record)
    headline: bool = False      # the paper's own main finding, not a side check
    level: float = 0.95         # of the interval: 0.975 when the table has an extension rule (two looks)
    controls: list[dict] = field(default_factory=list)   # {row, control, claim, status, margin, low, high}
    no_control: str | None = None   # `control: none`: why no naive alternative applies

    def to_dict(self) -> dict:
        return asdict(self)


def _parse(claim: str) -> ast.Compare:
    try:
        tree = ast.parse(claim, mode="eval").body
    except SyntaxError as err:
        raise UserError(f"claim '{claim}' is not an expression: {err.msg}", exit_code=2) from err
    if not isinstance(tree, ast.Compare):
        raise UserError(f"claim '{claim}' is not a comparison", exit_code=2)
    return tree


def _value(node, claim: str, table: dict[str, dict[str, np.ndarray]]) -> np.ndarray:
    """Per-seed values of an expression node (a constant broadcasts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return np.asarray(float(node.value))
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        row, metric = node.value.id, node.attr
        if row not in table or metric not in table[row]:
            raise UserError(f"claim '{claim}' names {row}.{metric}, which no run reported; rows: "
                            f"{sorted(table)}", exit_code=2)
        return table[row][metric]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_value(node.left, claim, table), _value(node.right, claim, table))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, claim, table)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "abs"
            and len(node.args) == 1 and not node.keywords):
        return np.abs(_value(node.args[0], claim, table))
    raise UserError(f"claim '{claim}': only row.metric names, numbers, + - * /, abs() and comparisons "
                    f"are allowed", exit_code=2)


def rows_of(claim: str) -> set[str]:
    """The table rows a claim names."""
    return {n.value.id for n in ast.walk(_parse(claim))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}


def t_interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student t-interval of the mean; degenerate when the spread is 0."""
    from scipy import stats

    n, mean = len(samples), float(np.mean(samples))
    if n < 2:
        return mean, -math.inf, math.inf
    sd = float(np.std(samples, ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def seeds_needed(samples: np.ndarray, level: float = 0.95, most: int = MOST_SEEDS) -> int | None:
    """The smallest n whose t-interval half-width t_{n-1} sd / sqrt(n) is below the mean margin,
    at the measured mean and spread; None when the mean margin is not positive."""
    from scipy import stats

    mean = float(np.mean(samples))
    sd = float(np.std(samples, ddof=1)) if len(samples) > 1 else 0.0
    if mean <= 0:
        return None
    if sd == 0:
        return MIN_SEEDS
    for n in range(MIN_SEEDS, most + 1):
        if float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n) < mean:
            return n
    return most + 1


def _link_status(margins: np.ndarray, strict: bool, level: float = 0.95) -> tuple[str, float, float, float]:
    mean, low, high = t_interval(margins, level)
    holds = mean > 0 if strict else mean >= 0
    if not holds:
        return FAIL, mean, low, high
    clears = low > 0 if strict else (low >= 0 and float(np.min(margins)) >= 0)
    if len(margins) < MIN_SEEDS:
        clears = False  # an interval from fewer than 3 seeds is not evidence
    return (PASS if clears else NOISE), mean, low, high


def judge(claim: str, table: dict[str, dict[str, list[float]]], why: str | None = None,
          level: float = 0.95) -> ClaimResult:
    """Evaluate `claim` on `table[row][metric]` = per-seed values (rows share the seed order)."""
    tree = _parse(claim)
    arrays = {r: {m: np.asarray(v, dtype=float) for m, v in metrics.items()} for r, metrics in table.items()}
    lengths = {len(v) for r in rows_of(claim) if r in arrays for v in arrays[r].values()}
    if len(lengths) > 1:
        raise UserError(f"claim '{claim}' compares rows with different numbers of seeds {sorted(lengths)}; "
                        f"rows of one table must share seeds", exit_code=2)
    left = _value(tree.left, claim, arrays)
    worst, filled = None, [f"{float(np.mean(left)):.4g}"]
    for op, node in zip(tree.ops, tree.comparators):
        if type(op) not in _CMP:
            raise UserError(f"claim '{claim}': comparison {type(op).__name__} not allowed", exit_code=2)
        right = _value(node, claim, arrays)
        sign = 1.0 if isinstance(op, (ast.Gt, ast.GtE)) else -1.0
        margins = np.atleast_1d(sign * (left - right))
        status, mean, low, high = _link_status(margins, isinstance(op, (ast.Lt, ast.Gt)), level)
        link = (status, mean, low, high, margins)
        if worst is None or _ORDER[status] > _ORDER[worst[0]] or (status == worst[0] and mean < worst[1]):
            worst = link
        filled += [_CMP[type(op)], f"{float(np.mean(right)):.4g}"]
        left = right
    status, mean, low, high, margins = worst
    return ClaimResult(claim, status, mean, low, high, " ".join(filled), [float(m) for m in margins],
                       seeds_needed(margins, level), why, level=level)


# --- claim entries and controls ------------------------------------------------------------

@dataclass(frozen=True)
class ClaimSpec:
    """One entry of `claims:` or `known_failures:`: a string, or a mapping
    {claim, headline, control: none, reason, controls: {row: [stand-ins]}, why}."""
    claim: str
    headline: bool = False
    no_control: str | None = None
    why: str | None = None
    controls: dict[str, list[str]] | None = None   # per-claim stand-ins, replacing the table's per row


_SPEC_KEYS = {"claim", "headline", "control", "reason", "controls", "why"}


def claim_spec(entry, known: bool = False) -> ClaimSpec:
    """Normalise a config entry; a misspelt key, `control` other than none, or `control: none`
    without a reason is a config error (exit 2)."""
    if isinstance(entry, str):
        if known:
            raise UserError(f"known failure '{entry}' needs a mapping {{claim, why}}", exit_code=2)
        return ClaimSpec(entry)
    entry = dict(entry)
    unknown = sorted(set(entry) - _SPEC_KEYS)
    if unknown or "claim" not in entry:
        raise UserError(f"claim entry {entry}: keys are {sorted(_SPEC_KEYS)} and `claim` is required "
                        f"(unknown: {unknown})", exit_code=2)
    control = entry.get("control")
    if control is not None and str(control).lower() != "none":
        raise UserError(f"claim '{entry['claim']}': `control` may only be `none` (controls are declared per "
                        f"row in table.controls); got {control!r}", exit_code=2)
    reason = entry.get("reason")
    if control is not None and not reason:
        raise UserError(f"claim '{entry['claim']}' says `control: none`: give the one-line `reason`", exit_code=2)
    if known and not entry.get("why"):
        raise UserError(f"known failure '{entry['claim']}' needs a `why`", exit_code=2)
    own = entry.get("controls")
    if own is not None:
        if control is not None:
            raise UserError(f"claim '{entry['claim']}': `controls` and `control: none` contradict each other",
                            exit_code=2)
        if not hasattr(own, "items") or not own:
            raise UserError(f"claim '{entry['claim']}': `controls` is a mapping row -> [stand-ins], got {own!r}",
                            exit_code=2)
        named = rows_of(str(entry["claim"]))
        if not set(own) <= named:
            raise UserError(f"claim '{entry['claim']}': `controls` names rows {sorted(set(own) - named)} that "
                            f"the claim does not compare", exit_code=2)
        own = {str(k): [str(c) for c in v] for k, v in own.items()}
    return ClaimSpec(str(entry["claim"]), bool(entry.get("headline", False)),
                     str(reason) if control is not None else None, entry.get("why"), own)


def claim_texts(cfg) -> list[str]:
    """The claim strings of a config's `claims` and `known_failures` (entries may be mappings)."""
    return [e if isinstance(e, str) else str(e["claim"]) for e in [*(cfg.get("claims") or []),
                                                                  *(cfg.get("known_failures") or [])]]


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old else node


def substitute(claim: str, row: str, control: str) -> str:
    """`claim` with every `row.metric` read as `control.metric`."""
    return ast.unparse(_Rename(row, control).visit(_parse(claim)))


def check_controls(controls: dict[str, list[str]], rows: set[str], where: str) -> None:
    """Every controlled row and every control names a row of the table (exit 2 otherwise)."""
    for row, stand_ins in controls.items():
        missing = sorted(({row} | set(stand_ins)) - rows)
        if missing:
            raise UserError(f"{where}: table.controls names {missing}, not rows of the table {sorted(rows)}",
                            exit_code=2)


def judge_spec(spec: ClaimSpec, table: dict[str, dict[str, list[float]]], controls: dict[str, list[str]],
               level: float = 0.95) -> ClaimResult:
    """`judge` plus each control version of the claim: with a controlled row it names replaced by a
    control (a control the claim already names is skipped: it would be compared with itself). A
    PASS that a control also PASSes becomes NOT DISCRIMINATING."""
    result = judge(spec.claim, table, level=level)
    result.headline, result.no_control = spec.headline, spec.no_control
    controls = {**controls, **(spec.controls or {})}
    if spec.no_control is None:
        named = rows_of(spec.claim)
        for row in sorted(named & set(controls)):
            for control in controls[row]:
                if control in named:
                    continue
                version = substitute(spec.claim, row, control)
                c = judge(version, table, level=level)
                result.controls.append({"row": row, "control": control, "claim": version, "status": c.status,
                                        "margin": c.margin, "low": c.low, "high": c.high})
    if result.status == PASS and any(c["status"] == PASS for c in result.controls):
        result.status = NOT_DISCRIMINATING
    return result
