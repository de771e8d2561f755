"""Running a table: every row x seed of an experiment config, reusing runs whose resolved
settings and code are unchanged (an interrupted reproduction resumes), then judging its claims."""
from __future__ import annotations

import json
import time
from pathlib import Path

from hydra import compose
from omegaconf import OmegaConf

from common.config import CONFIG_DIR, UserError
from common.reproduce.claims import MIN_SEEDS, judge
from common.reproduce.fingerprint import code_hash, config_targets, runtime_hash
from common.reproduce.machine import machine
from common.reproduce.record import RUN_INFO, TableResult
from common.runner import run_method

_NOT_RUN_SETTINGS = ("paper", "claims", "known_failures", "table", "tuned_on")  # what a run does not read


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


def run_settings(cfg) -> dict:
    settings = OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in settings.items() if k not in _NOT_RUN_SETTINGS}


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
    tuned = list((base.tuned_on or {}).get("seeds", []) or [])
    overlap = sorted(set(seeds) & set(tuned))
    if overlap:
        raise UserError(f"{experiment} would report seeds {overlap}, which chose its hyper-parameters "
                        f"(tuned_on.seeds = {tuned}); report other seeds", exit_code=2)
    if held_out:
        used = sorted(set(seeds) & set(base.table.seeds))
        if used:
            raise UserError(f"held-out seeds {used} are already seeds of {experiment}; pick new ones", exit_code=2)


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


def run_table(experiment: str, extra: list[str], fresh: bool, seeds: list[int] | None = None,
              log=print) -> TableResult:
    """All rows x seeds of one experiment config (`seeds` replaces the config's: held-out runs)."""
    base = compose("train", overrides=[f"experiment={experiment}", *extra])
    if base.table is None:
        raise UserError(f"experiment {experiment} has no `table:` block (rows and seeds)", exit_code=2)
    held_out = seeds is not None
    seeds = list(seeds) if held_out else list(base.table.seeds)
    check_seeds(experiment, base, seeds, held_out)
    code = code_hash(base.method.name)[0]
    runtimes: dict[frozenset, str] = {}
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
    runs = expand_rows(runs)
    table = TableResult(experiment=experiment, seeds=seeds, metrics=list(base.table.metrics), runs=runs,
                        paper=OmegaConf.to_container(base.paper) if base.paper else None,
                        tuned_on=OmegaConf.to_container(base.tuned_on) if base.tuned_on else None,
                        purpose=base.table.get("purpose", "report"), held_out=held_out)
    values = table.per_seed()
    table.claims = [judge(c, values) for c in base.claims]
    table.known_failures = [judge(k.claim, values, why=k.why) for k in base.known_failures]
    return table
