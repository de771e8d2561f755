"""Running a table: every row x seed of an experiment config, reusing runs whose resolved
settings and code are unchanged (an interrupted reproduction resumes), then judging its claims."""
from __future__ import annotations

import json
import time
from pathlib import Path

from hydra import compose
from omegaconf import OmegaConf

from common.config import CONFIG_DIR, UserError
from common.reproduce.claims import MIN_SEEDS, NOISE, check_controls, claim_spec, judge_spec
from common.reproduce.fingerprint import code_hash, config_targets, run_settings, runtime_hash
from common.reproduce.machine import machine
from common.reproduce.record import RUN_INFO, TableResult
from common.reproduce.why import fill
from common.runner import run_method
from common.target_types import check_targets

EXTENDED_LEVEL = 0.975   # a table that may extend its seeds looks at the data twice: each look at 97.5%


def experiments(method: str, tier: str, headline: bool = False) -> list[str]:
    """smoke/mini: <method>_<tier>*.yaml (only <method>_<tier>.yaml with `headline`);
    paper: every other <method>_<dataset>.yaml."""
    found = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob(f"{method}_*.yaml"))
    if headline and tier != "paper":
        found = [n for n in found if n == f"{method}_{tier}"]
    if tier == "paper":
        names = [n for n in found if not n.startswith((f"{method}_smoke", f"{method}_mini"))]
    else:
        names = [n for n in found if n.startswith(f"{method}_{tier}")]
    if not names:
        raise UserError(f"no experiment config configs/experiment/{method}_{tier}*.yaml; "
                        f"method '{method}' has no {tier} tier yet.", exit_code=2)
    return names


def _cached(cfg, code: str, runtime: str) -> tuple[dict, float | None, float | None, dict] | None:
    """(metrics, wall seconds, CPU seconds, {cpu, threads} or {}) of an earlier run with the same resolved run settings and
    the same code hash and run-machinery hash (editing a claim or the paper's numbers does not
    invalidate runs; editing the method, a `common/` module it imports, the trainer or runner does;
    a run recorded before the run machinery was hashed is judged on its code alone)."""
    run_dir = Path(cfg.run_dir)
    try:
        if run_settings(OmegaConf.load(run_dir / "config.yaml")) != run_settings(cfg):
            return None
        timing = json.loads((run_dir / "timing.json").read_text())
        if timing.get("code") != code or timing.get("runtime", runtime) != runtime:
            return None
        metrics = json.loads((run_dir / "metrics.json").read_text())
        return metrics, timing.get("wall_s"), timing.get("cpu_s"), {k: timing[k] for k in ("cpu", "threads") if k in timing}
    except (OSError, KeyError, ValueError):
        return None


def check_seeds(experiment: str, base, seeds: list[int], held_out: bool) -> None:
    """A claim rests on >= 3 seeds; no reported seed chose a hyper-parameter; held-out seeds are
    new to the config."""
    seeds = list(seeds)
    if base.claims and len(seeds) < MIN_SEEDS:
        raise UserError(f"{experiment} makes claims on {len(seeds)} seed(s); a claim needs at least "
                        f"{MIN_SEEDS} (table.seeds)", exit_code=2)
    check_tuned_on(experiment, base)
    tuned = list((base.tuned_on or {}).get("seeds", []) or [])
    overlap = sorted(set(seeds) & set(tuned))
    if overlap:
        raise UserError(f"{experiment} would report seeds {overlap}, which chose its hyper-parameters "
                        f"(tuned_on.seeds = {tuned}); report other seeds", exit_code=2)
    if held_out:
        used = sorted(set(seeds) & set(base.table.seeds))
        if used:
            raise UserError(f"held-out seeds {used} are already seeds of {experiment}; pick new ones", exit_code=2)


def check_tuned_on(experiment: str, base) -> None:
    """A table that reports claims says what chose its hyper-parameters: `{seeds, split}` with a
    split other than test, or `{seeds: [], split: none, reason}` when nothing was tuned. A tuning
    table (`table.purpose: tuning`) declares `table.split: val`: it chooses on validation data."""
    table = base.get("table") or {}
    if table.get("purpose") == "tuning":
        if table.get("split") != "val":
            raise UserError(f"{experiment} is a tuning table: it must read validation data and say so "
                            f"(table.split: val), got {table.get('split')!r}", exit_code=2)
        return
    if not (base.get("claims") or base.get("known_failures")):
        return
    tuned = base.get("tuned_on")
    if tuned is None:
        raise UserError(f"{experiment} reports claims but has no tuned_on: say what chose its hyper-parameters "
                        f"({{seeds: [...], split: val}}) or {{seeds: [], split: none, reason: ...}}", exit_code=2)
    split = str(tuned.get("split", ""))
    if split.startswith("test"):
        raise UserError(f"{experiment}: tuned_on.split is {split!r}; hyper-parameters are chosen on validation "
                        f"data, never on the test split", exit_code=2)
    if split == "none" and (tuned.get("seeds") or not tuned.get("reason")):
        raise UserError(f"{experiment}: tuned_on.split none takes no seeds and a `reason`", exit_code=2)
    if split not in ("none", "val", "train"):
        raise UserError(f"{experiment}: tuned_on.split must be val, train or none, got {split!r}", exit_code=2)


def controls_of(base) -> dict[str, list[str]]:
    table = base.get("table") or {}
    return {str(k): [str(c) for c in v] for k, v in (table.get("controls") or {}).items()}


def level_of(base) -> float:
    """95%, or 97.5% for a table that declares an extension rule (two looks at the data)."""
    return EXTENDED_LEVEL if (base.get("table") or {}).get("extend") else 0.95


def judge_claims(base, table: TableResult, experiment: str) -> None:
    """Judge `claims` and `known_failures` of `base` on `table` (its seeds), controls included;
    fills each `why`'s placeholders from the record."""
    values, controls, level = table.per_seed(), controls_of(base), level_of(base)
    if controls:
        check_controls(controls, set(values), experiment)
    table.controls = controls
    table.level = level
    specs = [claim_spec(c) for c in base.claims]
    known = [claim_spec(k, known=True) for k in base.known_failures]
    for spec in specs + known:
        if spec.controls:
            check_controls(spec.controls, set(values), f"{experiment}, claim '{spec.claim}'")
    table.claims = [judge_spec(spec, values, controls, level) for spec in specs]
    table.known_failures = []
    for spec in known:
        result = judge_spec(spec, values, controls, level)
        result.why = fill(spec.why, values, result, table.seeds)
        table.known_failures.append(result)


def extension_seeds(base, table: TableResult, taken: set[int], experiment: str) -> tuple[list[int], dict | None]:
    """The rule fixed in the config before the run (`table.extend: {to: N}`; `fixed: <when>` where it
    was set after a look at the data, which the table's page then says): when a claim is WITHIN
    NOISE at the first seeds and would resolve with at most N seeds at the measured margin and
    spread, the next seeds in order (skipping `taken`: tuning and report seeds) up to N in all, once.
    Returns (the seeds to add, the record {to, first_seeds, fired, why}; None without a rule)."""
    rule = (base.get("table") or {}).get("extend")
    if not rule:
        return [], None
    to, first = int(rule["to"]), list(table.seeds)
    judge_claims(base, table, experiment)
    reachable = [c for c in table.claims + table.known_failures
                 if c.status == NOISE and c.seeds_needed is not None and c.seeds_needed <= to]
    extra, s = [], max(first) + 1
    if reachable:
        while len(first) + len(extra) < to:
            if s not in taken:
                extra.append(s)
            s += 1
    if extra:
        names = "; ".join(f"`{c.claim}` (≈{c.seeds_needed} seeds)" for c in reachable)
        why = f"extended to {to} seeds: WITHIN NOISE at {len(first)} seeds, resolvable: {names}"
    elif len(first) >= to:
        why = f"not extended: already {len(first)} seeds"
    else:
        why = f"not extended: no claim WITHIN NOISE that {to} seeds would resolve"
    record = {"to": to, "first_seeds": first, "fired": bool(extra), "why": why}
    if rule.get("fixed"):     # when the rule was set, if not before any run (the render says "before the run")
        record["fixed"] = str(rule["fixed"])
    return extra, record


def expand_rows(runs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """A run may report several rows at once (procedures evaluated on the same trained model):
    a metric named `<sub>/<metric>` becomes `<metric>` of row `<sub>` (of row `<row>_<sub>` when
    the table has several configured rows). Plain metrics stay in the configured row."""
    out: dict[str, list[dict]] = {}
    for row, seeds in runs.items():
        for s in seeds:
            plain = {k: v for k, v in s.items() if "/" not in k}
            subs: dict[str, dict] = {}
            for k, v in s.items():
                if "/" in k:
                    sub, metric = k.split("/", 1)
                    subs.setdefault(sub if len(runs) == 1 else f"{row}_{sub}", {})[metric] = v
            if len(plain) > sum(1 for k in plain if k in RUN_INFO) or not subs:
                out.setdefault(row, []).append(plain)
            for name, metrics in subs.items():
                out.setdefault(name, []).append({k: plain[k] for k in RUN_INFO if k in plain} | metrics)
    return out


def _run_rows(experiment: str, base, extra: list[str], seeds: list[int], fresh: bool, log,
              code: str, runtimes: dict) -> dict[str, list[dict]]:
    """Every row of the table at `seeds`: row -> one dict per seed (RUN_INFO and metrics)."""
    runs: dict[str, list[dict]] = {}
    for row, row_overrides in base.table.rows.items():
        for seed in seeds:
            cfg = compose("train", overrides=[f"experiment={experiment}", *row_overrides, *extra,
                                              f"seed={seed}", f"run_name={experiment}/{row}"])
            targets = frozenset(config_targets(run_settings(cfg)))
            if targets not in runtimes:   # one file walk per distinct set of targets, not per run
                runtimes[targets] = runtime_hash(targets)[0]
            runtime = runtimes[targets]
            hit = None if fresh else _cached(cfg, code, runtime)
            if hit is None:
                start, cpu_start = time.perf_counter(), time.process_time()
                metrics = run_method(cfg)
                wall, cpu, status = time.perf_counter() - start, time.process_time() - cpu_start, "ran"
                where = machine(cfg.hardware.get("threads"))
                (Path(cfg.run_dir) / "timing.json").write_text(json.dumps({"wall_s": wall, "cpu_s": cpu, "code": code,
                                                                                  "runtime": runtime, **where}) + "\n")
            else:
                (metrics, wall, cpu, where), status = hit, "cached"
            log(f"[{experiment}] {row} seed={seed} ({status}{f', {wall:.0f} s' if wall else ''}): "
                + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
            runs.setdefault(row, []).append({"seed": seed, "run_dir": cfg.run_dir, "wall_s": wall, "cpu_s": cpu,
                                             **where, **metrics})
    return runs


def _merge(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {row: a.get(row, []) + b.get(row, []) for row in {**a, **b}}


def taken_seeds(base, held_out: bool) -> set[int]:
    """Seeds an extension must skip: the tuning seeds, and for held-out runs the report seeds."""
    taken = set((base.tuned_on or {}).get("seeds", []) or [])
    return taken | (set(base.table.seeds) if held_out else set())


def run_table(experiment: str, extra: list[str], fresh: bool, seeds: list[int] | None = None,
              log=print) -> TableResult:
    """All rows x seeds of one experiment config (`seeds` replaces the config's: held-out runs),
    extended once by the table's rule when it fires, and its claims judged."""
    base = compose("train", overrides=[f"experiment={experiment}", *extra])
    if base.table is None:
        raise UserError(f"experiment {experiment} has no `table:` block (rows and seeds)", exit_code=2)
    held_out = seeds is not None
    seeds = list(seeds) if held_out else list(base.table.seeds)
    check_seeds(experiment, base, seeds, held_out)
    for row_overrides in base.table.rows.values():   # a value of the wrong type fails before any run
        check_targets(compose("train", overrides=[f"experiment={experiment}", *row_overrides, *extra]))
    controls = controls_of(base)
    if controls and base.table.get("sub_rows"):
        # a misspelt control fails before any run (without declared sub-rows: after the first seeds)
        check_controls(controls, set(base.table.rows) | set(base.table.get("sub_rows") or []), experiment)
    entries = [(e, False) for e in base.claims or []] + [(e, True) for e in base.known_failures or []]
    for entry, is_known in entries:   # misspelt entries fail before any run
        spec = claim_spec(entry, known=is_known)
        if spec.controls and base.table.get("sub_rows"):
            check_controls(spec.controls, set(base.table.rows) | set(base.table.sub_rows),
                           f"{experiment}, claim '{spec.claim}'")
    code = code_hash(base.method.name)[0]
    runtimes: dict[frozenset, str] = {}
    runs = _run_rows(experiment, base, extra, seeds, fresh, log, code, runtimes)
    table = TableResult(experiment=experiment, seeds=seeds, metrics=list(base.table.metrics), runs=expand_rows(runs),
                        paper=OmegaConf.to_container(base.paper) if base.paper else None,
                        tuned_on=OmegaConf.to_container(base.tuned_on) if base.tuned_on else None,
                        purpose=base.table.get("purpose", "report"), held_out=held_out)
    more, table.extension = extension_seeds(base, table, taken_seeds(base, held_out), experiment)
    if table.extension:
        log(f"[{experiment}] {table.extension['why']}")
    if more:
        runs = _merge(runs, _run_rows(experiment, base, extra, more, fresh, log, code, runtimes))
        table.seeds, table.runs = seeds + more, expand_rows(runs)
    judge_claims(base, table, experiment)
    return table
