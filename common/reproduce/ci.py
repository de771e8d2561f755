"""What CI re-checks, within a time budget: every headline table whose code or settings changed
since it was recorded (a stale table fails CI when a claim fails), then, while the budget lasts,
a rotating share of the others, oldest verification first (`reproduce.py --ci-plan` prints it)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from common.config import CONFIG_DIR
from common.reproduce.fingerprint import staleness, table_fingerprint
from common.reproduce.publish import RESULTS_DIR


@dataclass
class PlanEntry:
    method: str
    experiment: str
    reason: str            # code changed | settings changed | no record | packages changed | rotation
    minutes: float         # from the recorded wall time of its runs
    verified: str          # when it was last published
    required: bool         # stale code/settings: always run


def headline_methods(tier: str = "mini") -> list[str]:
    return sorted(p.stem.removesuffix(f"_{tier}") for p in (CONFIG_DIR / "experiment").glob(f"*_{tier}.yaml"))


def _recorded(method: str, tier: str) -> tuple[dict | None, float, str]:
    path = RESULTS_DIR / f"{method}_{tier}.json"
    if not path.exists():
        return None, 0.0, "never"
    record = json.loads(path.read_text())
    table = next((t for t in record["tables"] if t["experiment"] == f"{method}_{tier}"), None)
    if table is None:
        return None, 0.0, "never"
    return table.get("fingerprint"), estimated_minutes(table["runs"]), record.get("provenance", {}).get("time", "never")


# CI's machine has 2 cores; torch uses both, at about this speed-up over one (measured on the
# CPU tiers). CPU seconds are what a run costs whatever else the machine did while it ran;
# wall seconds, recorded on a busy machine, overstate it.
CORES_USED = 1.6


def estimated_minutes(runs: dict[str, list[dict]]) -> float:
    """Minutes a table takes on CI's machine: its CPU time over the cores used, else wall time."""
    total = 0.0
    for seeds in runs.values():
        for s in seeds:
            total += s["cpu_s"] / CORES_USED if s.get("cpu_s") else (s.get("wall_s") or 0.0)
    return total / 60


def plan(budget_min: float, tier: str = "mini", unknown_min: float = 8.0) -> list[PlanEntry]:
    """Stale tables first (required), then packages-changed ones, then the oldest verified, while
    the estimated minutes fit `budget_min`. A table with no recorded time counts `unknown_min`."""
    from hydra import initialize_config_dir

    entries = []
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for method in headline_methods(tier):
            experiment = f"{method}_{tier}"
            recorded, minutes, verified = _recorded(method, tier)
            why = staleness(recorded, table_fingerprint(method, experiment))
            entries.append(PlanEntry(method, experiment, why or "rotation", minutes or unknown_min, verified,
                                     required=why in ("code changed", "settings changed", "no record")))
    required = [e for e in entries if e.required]
    optional = sorted((e for e in entries if not e.required),
                      key=lambda e: (e.reason != "packages changed", e.verified))
    chosen, used = list(required), sum(e.minutes for e in required)
    for e in optional:
        if used + e.minutes <= budget_min:
            chosen.append(e)
            used += e.minutes
    return chosen


def describe(entries: list[PlanEntry], budget_min: float) -> str:
    lines = [f"CI plan (budget {budget_min:.0f} min for tables):", "",
             "| method | table | why | est. min | last verified |", "|---|---|---|---|---|"]
    for e in entries:
        lines.append(f"| {e.method} | {e.experiment} | {e.reason}{' (required)' if e.required else ''} | "
                     f"{e.minutes:.1f} | {e.verified[:16]} |")
    total = sum(e.minutes for e in entries)
    skipped = len(headline_methods()) - len(entries)
    lines += ["", f"Estimated {total:.1f} min for {len(entries)} tables; {skipped} current tables wait for "
              f"a later rotation."]
    if sum(e.minutes for e in entries if e.required) > budget_min:
        lines.append("WARNING: the required (stale) tables alone exceed the budget: re-run them and commit "
                     "their results (make mini-all) instead of leaving them to CI.")
    return "\n".join(lines)


def run_plan(entries: list[PlanEntry]) -> int:
    """Re-check each planned table as CI does (print and check, write nothing); 1 on any failure."""
    import time

    from common.reproduce import reproduce

    status, start = 0, time.time()
    for e in entries:
        print(f"=== {e.experiment} ({e.reason}) after {time.time() - start:.0f} s ===", flush=True)
        status |= reproduce(e.method, "mini", check=True, extra=[], fresh=True, headline=True)
    print(f"CI tables finished in {time.time() - start:.0f} s")
    return status
