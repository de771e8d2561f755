"""The typed record of a reproduced table: what ran (rows x seeds), what it measured, how its
claims fared, and the fingerprint of the code and configs that produced it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from common.reproduce.claims import ClaimResult

RUN_INFO = ("seed", "run_dir", "wall_s", "cpu_s", "cpu", "threads")   # cpu: the CPU model, cpu_s: CPU seconds


@dataclass
class TableResult:
    experiment: str
    seeds: list[int]
    metrics: list[str]                                 # the columns the config asks for
    runs: dict[str, list[dict]]                        # row -> one dict per seed (RUN_INFO, metrics)
    claims: list[ClaimResult] = field(default_factory=list)
    known_failures: list[ClaimResult] = field(default_factory=list)
    paper: dict | None = None
    tuned_on: dict | None = None
    purpose: str = "report"                            # report | tuning (a sweep on validation data)
    fingerprint: dict | None = None
    figures: list[str] = field(default_factory=list)
    plot: str | None = None
    held_out: bool = False                             # run with --seeds other than the config's
    verified: dict | None = None                       # {git_sha, time} of the publication, {cpu, threads} of its runs
    controls: dict = field(default_factory=dict)       # row -> the naive rows that stand in for it
    level: float = 0.95                                # of the claims' intervals (0.975 with an extension rule)
    extension: dict | None = None                      # {to, first_seeds, fired, why} when the table has a rule
    rejudged: dict | None = None                       # {git_sha, time}: claims re-judged on the recorded runs

    def per_seed(self) -> dict[str, dict[str, list[float]]]:
        """row -> metric -> values in seed order (what claims are judged on)."""
        return {row: {k: [s[k] for s in seeds] for k in seeds[0] if k not in RUN_INFO}
                for row, seeds in self.runs.items()}

    def summary(self) -> dict[str, dict[str, tuple[float, float, int]]]:
        """row -> metric -> (mean, std over seeds, number of seeds)."""
        return {row: {k: (float(np.mean(v)), float(np.std(v)), len(v)) for k, v in metrics.items()}
                for row, metrics in self.per_seed().items()}

    def cpu_minutes(self) -> float:
        """CPU time of its runs in minutes (all threads), robust to a loaded machine."""
        return float(sum(s.get("cpu_s") or 0.0 for s in distinct_runs(self.runs))) / 60

    def wall_s(self) -> float:
        """Seconds of the runs executed (reused runs count what they took when they ran)."""
        return float(sum(s.get("wall_s") or 0.0 for s in distinct_runs(self.runs)))

    def to_dict(self) -> dict:
        out = asdict(self)
        out["summary"] = self.summary()
        return out

    @staticmethod
    def from_dict(d: dict) -> "TableResult":
        keep = {k: v for k, v in d.items() if k in TableResult.__dataclass_fields__}
        keep["claims"] = [ClaimResult(**c) for c in d.get("claims", [])]
        keep["known_failures"] = [ClaimResult(**c) for c in d.get("known_failures", [])]
        return TableResult(**keep)


def distinct_runs(runs: dict[str, list[dict]]) -> list[dict]:
    """Each run once: a run that reports several rows (`<row>/<metric>`) stands in each of them."""
    seen, out = set(), []
    for seeds in runs.values():
        for s in seeds:
            key = s.get("run_dir") or id(s)
            if key not in seen:
                seen.add(key)
                out.append(s)
    return out
