"""Re-judging a published table on its recorded runs, without running anything.

A claim, a control, a headline mark, a known failure's `why`, the `paper:` block or an extension
rule is not a run setting: changing one must not cost a re-run. `reproduce.py <m> --rejudge` reads
results/<m>_<tier>[_heldout].json, checks that the code, run machinery, settings and packages that
produced each table still match (otherwise the runs describe other code: re-run it), applies the
table's extension rule to the recorded seeds (refusing when it needs seeds the record lacks), judges
every claim again and publishes the record with a `rejudged` stamp beside its original `verified` one.
A stale table other than the headline one is kept as recorded, with a warning (it needs a re-run).
`--only EXP,...` re-judges just those tables and keeps the others as recorded, so a supporting table's
claim can be re-judged while the headline table waits for its re-run."""
from __future__ import annotations

import json

from hydra import compose
from omegaconf import OmegaConf

from common import results
from common.config import UserError
from common.reproduce.fingerprint import record_staleness, table_fingerprint
from common.reproduce.publish import RESULTS_DIR, stem
from common.reproduce.record import TableResult
from common.reproduce.tables import extension_seeds, judge_claims, taken_seeds


def _only_seeds(table: TableResult, seeds: list[int]) -> TableResult:
    have = {s["seed"] for rows in table.runs.values() for s in rows}
    missing = sorted(set(seeds) - have)
    if missing:
        raise UserError(f"{table.experiment}: the record has no runs for seeds {missing}; re-run the table "
                        f"instead of re-judging it", exit_code=2)
    runs = {row: [s for s in rows if s["seed"] in seeds] for row, rows in table.runs.items()}
    return TableResult(**{**table.__dict__, "seeds": list(seeds), "runs": runs})


def rejudge_table(method: str, table: TableResult, extra: list[str]) -> TableResult:
    """The recorded `table` judged by the configs as they stand now."""
    base = compose("train", overrides=[f"experiment={table.experiment}", *extra])
    current = table_fingerprint(method, table.experiment, extra)
    recorded = dict(table.fingerprint or {})
    why = record_staleness(recorded, current, ignore_seeds=True)
    if why is not None:
        raise UserError(f"{table.experiment}: {why} since it was recorded; its runs describe other code or "
                        f"settings, so re-run it (python scripts/reproduce.py {method} --tier mini "
                        f"--only {table.experiment}{' --seeds ...' if table.held_out else ''})", exit_code=2)
    if table.held_out:
        first = (table.extension or {}).get("first_seeds") or table.seeds[:len(base.table.seeds)]
    else:
        first = list(base.table.seeds)
    out = _only_seeds(table, first)
    more, extension = extension_seeds(base, out, taken_seeds(base, table.held_out), table.experiment)
    if more:
        out = _only_seeds(table, first + more)
    out.extension = extension
    judge_claims(base, out, table.experiment)
    out.fingerprint = {**recorded, "seeds": current["seeds"], "extend": current.get("extend")}
    # the paper's source and numbers are not run settings either: the record takes the config's
    out.paper = OmegaConf.to_container(base.paper) if base.paper else None
    out.rejudged = {k: v for k, v in results.provenance().items() if k in ("git_sha", "time")}
    return out


def rejudge(method: str, tier: str, held_out: bool, extra: list[str],
            only: list[str] | None = None) -> list[TableResult]:
    path = RESULTS_DIR / f"{stem(method, tier, held_out)}.json"
    if not path.exists():
        raise UserError(f"no record {path.relative_to(results.ROOT)} to re-judge; run the table first", exit_code=2)
    record = json.loads(path.read_text())
    recorded = [d["experiment"] for d in record["tables"]]
    unknown = sorted(set(only or ()) - set(recorded))
    if unknown:
        raise UserError(f"--only {','.join(unknown)}: not in {path.name} (it holds {', '.join(recorded)})",
                        exit_code=2)
    tables = []
    for d in record["tables"]:
        table = TableResult.from_dict(d)
        if table.purpose == "tuning" or (only and table.experiment not in only):
            tables.append(table)   # a sweep makes no claims; a table --only leaves out is not judged
            continue
        try:
            tables.append(rejudge_table(method, table, extra))
        except UserError as err:
            if table.experiment == f"{method}_{tier}" or only:
                raise   # the headline table, or one named by --only, must be judged by today's claims
            print(f"warning: kept as recorded, not re-judged: {err}")
            tables.append(table)
    return tables
