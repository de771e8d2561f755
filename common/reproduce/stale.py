"""Every published table whose code or settings moved since it was recorded, over all records.

`--ci-plan` looks only at each method's headline table on report seeds, because that is what CI
re-runs; a supporting table (`<m>_mini_long`, ...) or a held-out record that went stale is shown
nowhere else. `reproduce.py --stale` lists them all, so a change to a shared module can be checked
for what it invalidates before it is committed, and exits 1 when any is stale. A stale tuning sweep
is listed but not counted: it records what a choice was made on, at the code of that time."""
from __future__ import annotations

import json
from dataclasses import dataclass

from common.config import CONFIG_DIR
from common.reproduce.fingerprint import record_staleness, table_fingerprint
from common.reproduce.publish import RESULTS_DIR


@dataclass
class StaleTable:
    record: str       # results/<file>.json
    experiment: str
    held_out: bool
    reason: str       # code changed | run machinery changed | settings changed | ...
    tuning: bool      # a sweep's record: it shows what a choice was made on, so it is listed, not counted


def stale_tables(tier: str = "mini", methods: list[str] | None = None) -> list[StaleTable]:
    from hydra import initialize_config_dir

    found = []
    paths = sorted(RESULTS_DIR.glob(f"*_{tier}.json")) + sorted(RESULTS_DIR.glob(f"*_{tier}_heldout.json"))
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for path in paths:
            record = json.loads(path.read_text())
            method = record["method"]
            if methods and method not in methods:
                continue
            held_out = bool(record.get("held_out"))
            for table in record["tables"]:
                experiment = table["experiment"]
                if not (CONFIG_DIR / "experiment" / f"{experiment}.yaml").exists():
                    found.append(StaleTable(path.name, experiment, held_out, "config removed", False))
                    continue
                why = record_staleness(table.get("fingerprint"), table_fingerprint(method, experiment), held_out,
                                       table.get("seeds"))
                if why is not None:
                    found.append(StaleTable(path.name, experiment, held_out, why, table.get("purpose") == "tuning"))
    return found


def describe(found: list[StaleTable]) -> str:
    judged = [t for t in found if not t.tuning]
    lines = [f"{len(judged)} published tables are stale (re-run them and commit results/)" if judged
             else "No published table is stale."]
    if found:
        lines += ["", "| record | table | seeds | why |", "|---|---|---|---|"]
        lines += [f"| {t.record} | {t.experiment} | {'held-out' if t.held_out else 'report'}"
                  f"{' (tuning sweep: not counted)' if t.tuning else ''} | {t.reason} |" for t in found]
    return "\n".join(lines)
