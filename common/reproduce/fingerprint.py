"""What produced a table: a hash of the method's code (its package and every `common/` module it
imports, transitively), of the resolved settings of every row, and the package versions. A table
whose code or settings hash no longer matches its record is stale and CI re-runs it."""
from __future__ import annotations

import ast
import hashlib
import json
from importlib import metadata
from pathlib import Path

from common.results import ROOT

PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "timm", "transformers", "pymatgen", "pyod", "pot",
            "torch-pruning", "networkx")


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}  # `from common import data`
    return {n for n in names if n.split(".")[0] in ("common", "methods")}


def code_files(method: str) -> list[Path]:
    """The method's package and the repository modules it imports, transitively (package
    __init__ files included: importing common.data.x runs common/data/__init__.py)."""
    return _walk(sorted((ROOT / "methods" / method).rglob("*.py")))


def _walk(todo: list[Path]) -> list[Path]:
    """`todo` and every repository module they import, transitively (package __init__ files too)."""
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                found = _module_file(".".join(parts[:i]))
                if found is not None and found not in seen:
                    todo.append(found)
    return sorted(seen)


# What every run goes through without a method importing it: the runner builds the context, the
# trainer steps the optimiser (schedule, clipping, AMP, checkpoints, callbacks); `_target_` strings
# in the configs name more (backbones, optimisers' wrappers). A static scan of the method's imports
# does not see them, so they are hashed apart ("runtime") and a change to them makes tables stale too.
RUN_MACHINERY = ("common.runner", "common.trainer", "common.callbacks", "common.checkpoint",
                 "common.instantiate", "common.hardware")


def config_targets(settings) -> set[str]:
    """Every `_target_` string of the repository's own code (common., methods.) in a nested config."""
    found: set[str] = set()
    if isinstance(settings, dict):
        for key, value in settings.items():
            if key == "_target_" and isinstance(value, str) and value.split(".")[0] in ("common", "methods"):
                found.add(value)
            else:
                found |= config_targets(value)
    elif isinstance(settings, list):
        for value in settings:
            found |= config_targets(value)
    return found


def runtime_files(targets: set[str] = frozenset()) -> list[Path]:
    """The run machinery and the modules named by `targets` (a `_target_` names a module or an
    attribute of one), with what they import, transitively."""
    starts = []
    for name in (*RUN_MACHINERY, *sorted(targets)):
        parts = name.split(".")
        found = next((f for i in range(len(parts), 0, -1) if (f := _module_file(".".join(parts[:i]))) is not None), None)
        if found is not None:
            starts.append(found)
    return _walk(starts)


def runtime_hash(targets: set[str] = frozenset()) -> tuple[str, dict[str, str]]:
    files = {str(p.relative_to(ROOT)): _sha(p.read_bytes())[:16] for p in runtime_files(targets)}
    return _sha(json.dumps(files, sort_keys=True).encode()), files


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_hash(method: str) -> tuple[str, dict[str, str]]:
    files = {str(p.relative_to(ROOT)): _sha(p.read_bytes())[:16] for p in code_files(method)}
    return _sha(json.dumps(files, sort_keys=True).encode()), files


_NOT_RUN_SETTINGS = ("paper", "claims", "known_failures", "table", "tuned_on")  # what a run does not read


def run_settings(cfg) -> dict:
    """The resolved settings a run reads: the config without the table's own keys (claims, rows,
    the paper's numbers), so editing a claim never invalidates a run."""
    from omegaconf import OmegaConf

    settings = OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in settings.items() if k not in _NOT_RUN_SETTINGS}


def settings_hash(row_settings: dict[str, dict]) -> str:
    """Hash of every row's resolved run settings (seed, run dir and name left out)."""
    clean = {row: {k: v for k, v in s.items() if k not in ("seed", "run_dir", "run_name")}
             for row, s in row_settings.items()}
    return _sha(json.dumps(clean, sort_keys=True, default=str).encode())


def env_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def table_fingerprint(method: str, experiment: str, extra: list[str] = ()) -> dict:
    """{code, settings, env, files} of one experiment table as the configs stand now."""
    from hydra import compose

    base = compose("train", overrides=[f"experiment={experiment}", *extra])
    rows = {row: run_settings(compose("train", overrides=[f"experiment={experiment}", *ov, *extra]))
            for row, ov in base.table.rows.items()}
    code, files = code_hash(method)
    runtime, runtime_files_ = runtime_hash(set().union(*(config_targets(r) for r in rows.values())))
    return {"code": code, "runtime": runtime, "settings": settings_hash(rows), "env": env_versions(), "files": files,
            "runtime_files": runtime_files_, "seeds": list(base.table.seeds),
            "extend": int(base.table.extend.to) if base.table.get("extend") else None}


def record_staleness(recorded: dict | None, current: dict, ignore_seeds: bool,
                     seeds: list[int] | None = None) -> str | None:
    """`staleness` as a record's own seeds allow. `ignore_seeds`: compare code, settings and packages
    only (a held-out record ran other seeds by design; `--rejudge` re-derives the seeds from the
    record by the current extension rule). Otherwise a record made before seeds were fingerprinted
    is judged on the table's own `seeds`."""
    recorded = dict(recorded or {})
    if ignore_seeds:
        recorded.update(seeds=current["seeds"], extend=current.get("extend"))
    elif "seeds" not in recorded and seeds is not None:
        recorded["seeds"] = seeds
    return staleness(recorded or None, current)


def staleness(recorded: dict | None, current: dict) -> str | None:
    """Why a recorded table no longer matches: 'no record', 'code changed', 'run machinery changed',
    'settings changed', 'seeds changed', 'packages changed', or None when it is current (a record
    without seeds or runtime in its fingerprint, made before they were fingerprinted, is not judged
    on them; ci._recorded adds the table's own seed list)."""
    if not recorded:
        return "no record"
    if recorded.get("code") != current["code"]:
        return "code changed"
    if "runtime" in recorded and recorded["runtime"] != current.get("runtime"):
        return "run machinery changed"
    if recorded.get("settings") != current["settings"]:
        return "settings changed"
    seeds = recorded.get("seeds")
    if seeds is not None and "seeds" in current and list(seeds) != list(current["seeds"]):
        return "seeds changed"
    if recorded.get("extend") != current.get("extend"):
        return "seeds changed"   # the extension rule decides which seeds run
    if recorded.get("env") != current["env"]:
        return "packages changed"
    return None
