"""What CI re-checks, within a time budget: the headline tables whose code or settings changed
since they were recorded (stale; a stale table fails CI when a claim fails), cheapest first, then,
while the budget lasts, a rotating share of the others, oldest verification first
(`reproduce.py --ci-plan` prints it).

Stale tables that do not fit the budget are not run: CI lists them as STALE (their committed
numbers describe older code) and exits 0 for them. A table with no fingerprinted record at all
(never recorded under the current protocol) has nothing for CI to re-check: CI lists it as
UNRECORDED and does not run it (CI writes nothing, so running it would never record it). The fix
for both is the one the design asks for: re-run them (`make mini-all`) and commit results/, not a
CI that outgrows its 90 minutes."""
from __future__ import annotations

import json
from dataclasses import dataclass

from common.config import CONFIG_DIR
from common.reproduce.fingerprint import staleness, table_fingerprint
from common.reproduce.publish import RESULTS_DIR
from common.reproduce.record import distinct_runs


@dataclass
class PlanEntry:
    method: str
    experiment: str
    reason: str            # code changed | settings changed | no record | packages changed | rotation
    minutes: float         # from the recorded wall time of its runs
    verified: str          # when it was last published
    required: bool         # stale code/settings: run first, cheapest first
    deferred: bool = False  # stale but beyond the budget: listed, not run


def headline_methods(tier: str = "mini") -> list[str]:
    return sorted(p.stem.removesuffix(f"_{tier}") for p in (CONFIG_DIR / "experiment").glob(f"*_{tier}.yaml"))


def _recorded(method: str, tier: str) -> tuple[dict | None, float, str]:
    """(fingerprint with the recorded seeds in it, estimated minutes, time of the record)."""
    path = RESULTS_DIR / f"{method}_{tier}.json"
    if not path.exists():
        return None, 0.0, "never"
    record = json.loads(path.read_text())
    table = next((t for t in record["tables"] if t["experiment"] == f"{method}_{tier}"
                  and not t.get("held_out")), None)
    if table is None:
        return None, 0.0, "never"
    fingerprint = table.get("fingerprint")
    if fingerprint is not None and "seeds" not in fingerprint and table.get("seeds") is not None:
        fingerprint = {**fingerprint, "seeds": table["seeds"]}
    stamp = table.get("verified") or record.get("provenance", {})   # per table; older records: per file
    return fingerprint, estimated_minutes(table["runs"]), stamp.get("time", "never")




def estimated_minutes(runs: dict[str, list[dict]]) -> float:
    """Minutes a table takes on CI's machine: its CPU time (.ci/run re-checks at one thread, as the
    records were made; `--ci-plan` so prints the plan .ci/run executes, whatever this shell's thread
    setting), else its wall time. CPU seconds are what a run costs whatever else the machine did
    while it ran; wall seconds, recorded on a busy machine, overstate it."""
    total = 0.0
    for s in distinct_runs(runs):
        total += s.get("cpu_s") or s.get("wall_s") or 0.0
    return total / 60


def plan(budget_min: float, tier: str = "mini", unknown_min: float = 8.0) -> list[PlanEntry]:
    """Stale tables first (cheapest first; those beyond `budget_min` are kept as `deferred`), then
    packages-changed ones, then the oldest verified, while the estimated minutes fit `budget_min`;
    tables with no fingerprinted record last, never run (UNRECORDED). A table with no recorded time
    counts `unknown_min`."""
    from hydra import initialize_config_dir

    entries = []
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for method in headline_methods(tier):
            experiment = f"{method}_{tier}"
            recorded, minutes, verified = _recorded(method, tier)
            why = staleness(recorded, table_fingerprint(method, experiment))
            entries.append(PlanEntry(method, experiment, why or "rotation", minutes or unknown_min, verified,
                                     required=why in ("code changed", "settings changed", "seeds changed"),
                                     deferred=why == "no record"))
    unrecorded = [e for e in entries if e.reason == "no record"]
    entries = [e for e in entries if e.reason != "no record"]
    required = sorted((e for e in entries if e.required), key=lambda e: (e.minutes, e.method))
    optional = sorted((e for e in entries if not e.required),
                      key=lambda e: (e.reason != "packages changed", e.verified))
    chosen, used = [], 0.0
    for e in required + optional:
        if used + e.minutes <= budget_min:
            chosen.append(e)
            used += e.minutes
        elif e.required:
            e.deferred = True
            chosen.append(e)
    return chosen + unrecorded


def describe(entries: list[PlanEntry], budget_min: float) -> str:
    lines = [f"CI plan (budget {budget_min:.0f} min for tables):", "",
             "| method | table | why | est. min | last verified |", "|---|---|---|---|---|"]
    for e in entries:
        tag = (" (UNRECORDED: not run)" if e.reason == "no record" else " (STALE, beyond the budget: not run)"
               if e.deferred else " (required)" if e.required else "")
        lines.append(f"| {e.method} | {e.experiment} | {e.reason}{tag} | {e.minutes:.1f} | {e.verified[:16]} |")
    runs = [e for e in entries if not e.deferred]
    total = sum(e.minutes for e in runs)
    skipped = len(headline_methods()) - len(entries)
    lines += ["", f"Estimated {total:.1f} min for {len(runs)} tables; {skipped} current tables wait for "
              f"a later rotation."]
    deferred = [e.method for e in entries if e.deferred and e.reason != "no record"]
    unrecorded = [e.method for e in entries if e.reason == "no record"]
    if unrecorded:
        lines.append(f"WARNING: {len(unrecorded)} headline tables have no fingerprinted record and are not "
                     f"checked by CI: {', '.join(unrecorded)}. Run them (make mini-all) and commit results/.")
    if deferred:
        lines.append(f"WARNING: {len(deferred)} stale tables do not fit the budget and are not re-checked: "
                     f"{', '.join(deferred)}. Their committed numbers describe older code; re-run them "
                     "(make mini-all) and commit results/.")
    return "\n".join(lines)


def run_plan(entries: list[PlanEntry], budget_min: float = float("inf")) -> int:
    """Re-check each planned table as CI does (print and check, write nothing); 1 on any failure.
    A table whose estimate no longer fits the minutes left (estimates from a busy machine can be
    off) is skipped with a note rather than pushing CI past its limit."""
    import time

    from common.reproduce import reproduce

    status, start = 0, time.time()
    for e in entries:
        left = budget_min - (time.time() - start) / 60
        if e.reason == "no record":
            print(f"=== {e.experiment}: not run (UNRECORDED: no fingerprinted record to re-check) ===", flush=True)
            continue
        if e.deferred or e.minutes > left:
            print(f"=== {e.experiment}: not run ({'stale, ' if e.required else ''}estimated {e.minutes:.1f} min, "
                  f"{max(left, 0):.1f} min of the budget left) ===", flush=True)
            continue
        print(f"=== {e.experiment} ({e.reason}) after {time.time() - start:.0f} s ===", flush=True)
        status |= reproduce(e.method, "mini", check=True, extra=[], fresh=True, headline=True)
    print(f"CI tables finished in {time.time() - start:.0f} s")
    return status
