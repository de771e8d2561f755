"""The engine of scripts/reproduce.py, in three parts around a typed record (record.py):
running tables (tables.py), judging claims beyond seed noise (claims.py), rendering and
publishing them (render.py, publish.py); plus the fingerprints and CI plan (fingerprint.py, ci.py)."""
from __future__ import annotations

from hydra import initialize_config_dir

from common.config import CONFIG_DIR, UserError
from common.reproduce.claims import PASS
from common.reproduce.fingerprint import table_fingerprint
from common.reproduce.publish import publish
from common.reproduce.record import TableResult
from common.reproduce.render import markdown
from common.reproduce.tables import experiments, run_table


def _has_claims(experiment: str, extra: list[str]) -> bool:
    from hydra import compose

    cfg = compose("train", overrides=[f"experiment={experiment}", *extra])
    return bool(cfg.claims or cfg.known_failures)


def verdict(tables: list[TableResult], method: str = "", tier: str = "", log=print) -> int:
    """1 when any claim is not a PASS (NOT DISCRIMINATING included; known failures are shown, not
    enforced), or when the headline table tests nothing (neither a claim nor a known failure)."""
    failed = [f"{c.claim} ({c.status})" for t in tables for c in t.claims if c.status != PASS]
    empty = [t.experiment for t in tables if t.experiment == f"{method}_{tier}" and t.purpose != "tuning"
             and not (t.claims or t.known_failures)]
    if empty:
        log(f"headline table {empty[0]} declares neither a claim nor a known failure: it tests nothing")
    if failed:
        log("claims that did not PASS: " + "; ".join(failed))
    return 1 if failed or empty else 0


def rejudge_published(method: str, tier: str, held_out: bool, check: bool, extra: list[str],
                      only: list[str] | None = None) -> int:
    """Judge a published record again by the configs as they stand (no run; see rejudge.py)."""
    from common.reproduce.rejudge import rejudge

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        tables = rejudge(method, tier, held_out, extra, only)
    command = f"python scripts/reproduce.py {method} --tier {tier}" + (" --seeds ..." if held_out else "")
    print(publish(method, tier, tables, command, {}, rejudged=True))
    code = verdict(tables, method, tier)
    return code if check else 0


def reproduce(method: str, tier: str, check: bool, extra: list[str], fresh: bool = False,
              headline: bool = False, seeds: list[int] | None = None, only: list[str] | None = None) -> int:
    """Run the tier's tables (with `seeds`: the held-out re-run, tables with claims only), judge
    their claims, publish them (unless `headline`: print and check only, as CI does). `only`: these
experiments of the tier, the record's other tables kept as they are."""
    command = f"python scripts/reproduce.py {method} --tier {tier}" + (
        f" --seeds {','.join(map(str, seeds))}" if seeds else "") + "".join(f" {o}" for o in extra)
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        names = experiments(method, tier, headline)
        if only:
            unknown = sorted(set(only) - set(names))
            if unknown:
                raise UserError(f"--only {unknown}: not among {method}'s {tier} tables {names}", exit_code=2)
            names = [n for n in names if n in only]
        tables = []
        for name in names:
            if seeds is not None and not _has_claims(name, extra):
                continue  # held-out seeds test claims; a table without any has nothing to test
            tables.append(run_table(name, extra, fresh, seeds))
        fingerprints = {} if headline else {t.experiment: table_fingerprint(method, t.experiment, extra)
                                            for t in tables}
    if headline:
        print(markdown(method, tier, tables, command))
    else:
        print(publish(method, tier, tables, command, fingerprints, keep_others=bool(only)))
    code = verdict(tables, method, tier)
    return code if check else 0


__all__ = ["reproduce", "verdict", "experiments", "run_table", "TableResult"]
