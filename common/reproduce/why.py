"""Numbers in a known failure's `why` come from the record, never from the config's text.

A `why` holds the reasoning; a number enters it only through a placeholder filled when the table is
judged, so a re-run can never leave a stale number behind:

    {row.metric}     the mean of a row's metric over the table's seeds
    {margin}         the claim's mean paired margin (> 0: the claim holds on the mean)
    {interval}       its t-interval, "[low, high]" at the table's level (95%, 97.5% when extended)
    {seeds}          the seeds judged, "0, 1, 2"
    {per_seed}       the margin per seed, "0.12, -0.03, 0.08"
    {seeds_needed}   seeds that would resolve it at the measured margin and spread; "no number of"
                     when the mean margin does not hold, "more than 50" past the search, and a "~" or
                     "≈" written just before it is dropped then, so "~{seeds_needed} seeds" reads
                     "no number of seeds", never "~— seeds"
A literal decimal (a digit, a point, a digit) in a `why` is refused by a test over every config.
"""
from __future__ import annotations

import re

import numpy as np

from common.config import UserError
from common.reproduce.claims import MOST_SEEDS, ClaimResult

PLACEHOLDER = re.compile(r"([~≈]?)\{([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?\}")
LITERAL_DECIMAL = re.compile(r"\d\.\d")
CLAIM_FIELDS = ("margin", "interval", "seeds", "per_seed", "seeds_needed")


def seeds_needed_text(n: int | None, approx: str = "") -> str:
    """How many seeds would resolve a claim, in words: `approx` ("~", "≈") only before a count."""
    if n is None:
        return "no number of"
    return f"more than {MOST_SEEDS}" if n > MOST_SEEDS else f"{approx}{n}"


def _num(x: float) -> str:
    return f"{x:.4g}"


def fill(template: str | None, table: dict[str, dict[str, list[float]]], result: ClaimResult,
         seeds: list[int]) -> str | None:
    """`template` with every placeholder replaced from `table` (row -> metric -> per-seed values)
    and the judged `result`; an unknown placeholder is a config error (exit 2)."""
    if template is None:
        return None

    def one(match: re.Match) -> str:
        approx, name, metric = match.group(1), match.group(2), match.group(3)
        if name == "seeds_needed" and metric is None:
            return seeds_needed_text(result.seeds_needed, approx)
        return approx + value(name, metric)

    def value(name: str, metric: str | None) -> str:
        if metric is not None:
            if name not in table or metric not in table[name]:
                raise UserError(f"why of '{result.claim}': {{{name}.{metric}}} names no reported value; rows: "
                                f"{sorted(table)}", exit_code=2)
            return _num(float(np.mean(table[name][metric])))
        if name == "margin":
            return _num(result.margin)
        if name == "interval":
            return f"[{_num(result.low)}, {_num(result.high)}]" if np.isfinite(result.low) else "[—]"
        if name == "seeds":
            return ", ".join(map(str, seeds))
        if name == "per_seed":
            return ", ".join(_num(m) for m in result.per_seed)
        raise UserError(f"why of '{result.claim}': unknown placeholder {{{name}}}; use {{row.metric}} or one "
                        f"of {', '.join('{' + f + '}' for f in CLAIM_FIELDS)}", exit_code=2)

    return PLACEHOLDER.sub(one, template)
