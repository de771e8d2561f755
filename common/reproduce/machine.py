"""Which machine a run ran on: the CPU model and torch's thread count. A training run's floats move
between CPU types and thread counts (the same code and seed gave mixreg's transformer nmse 0.109 on
one CPU type and 0.113 on another), so a recorded number that moves on a re-check is attributable.
Recorded per run (timing.json) and summarised per table in its `verified` stamp; kept out of
`common.results.provenance`, which is in every table's code fingerprint."""
from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

import torch


@cache   # read once per process, not once per run
def cpu_model() -> str:
    """'<model name> (family F, model M)' from /proc/cpuinfo (a virtual machine's model name can be
    as generic as "AMD EPYC": family and model tell the core), else what platform knows."""
    try:
        info: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
        if "model name" in info:
            return f"{info['model name']} (family {info.get('cpu family', '?')}, model {info.get('model', '?')})"
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine(threads: int | None = None) -> dict:
    """{cpu, threads} of a run: `threads` is the run's `hardware.threads` when it sets one (the runner
    sets torch's count to it for the run), else torch's count in this process."""
    return {"cpu": cpu_model(), "threads": int(threads) if threads else torch.get_num_threads()}


def runs_machine(runs: dict[str, list[dict]]) -> dict:
    """The {cpu, threads} shared by a table's runs; where they differ, each distinct value joined by
    '; ' ("mixed"); {} when no run recorded one (runs made before machines were recorded)."""
    seen = [r for rows in runs.values() for r in rows if "cpu" in r]
    if not seen:
        return {}
    out = {}
    for key in ("cpu", "threads"):
        values = sorted({str(r[key]) for r in seen})
        out[key] = seen[0][key] if len(values) == 1 else "mixed: " + "; ".join(values)
    if len(seen) < sum(len(rows) for rows in runs.values()):
        out["cpu"] = f"{out['cpu']} ({len(seen)} runs; the others recorded none)"
    return out
