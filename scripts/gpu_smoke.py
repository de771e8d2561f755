"""The paper-tier smokes of scripts/gpu_check.sh in one process (the imports are paid once):

    python scripts/gpu_smoke.py --round first --steps 3 --budget-s 400 [--floor-s 15] [--cpu] [--methods a,b]

`--round first`: each method's first paper config; `rest`: its other configs. Each config gets
max(floor, time left / configs left) seconds (common/reproduce/paper.py gpu_smoke, cut by SIGALRM),
and writes its peak memory and step time to benchmarks/results/gpu_<method>.json. A config that this
check already started (`--since`: its start time) is not run again, so the shell can restart this
process after a crash and go on with the next config.
`--list`: print each method's paper configs, one method a line (the shell's plan)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def plan(methods: list[str]) -> dict[str, list[str]]:
    from common.reproduce.tables import experiments

    out = {}
    for m in methods:
        try:
            out[m] = experiments(m, "paper")
        except Exception:   # a method without a paper tier has nothing to smoke
            continue
    return out


def all_methods() -> list[str]:
    root = Path(__file__).resolve().parents[1] / "methods"
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("__"))


def done(method: str, name: str, results: Path, since: float) -> bool:
    path = results / f"gpu_{method}.json"
    if not path.exists() or path.stat().st_mtime < since:
        return False
    row = json.loads(path.read_text()).get("configs", {}).get(name, {})
    return row.get("started_at", 0) >= since      # run (or crashed the process) in this check already


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--round", choices=("first", "rest", "all"), default="all")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=400.0)
    p.add_argument("--floor-s", type=float, default=15.0)
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--methods", type=lambda s: [m for m in s.split(",") if m], default=None)
    p.add_argument("--since", type=float, default=0.0, help="the check's start (epoch s): skip configs done since")
    p.add_argument("--list", action="store_true")
    args = p.parse_args()
    configs = plan(args.methods or all_methods())
    if args.list:
        for m, names in configs.items():
            print(m, *names)
        return 0
    from common.reproduce.paper import RESULTS, gpu_smoke

    todo = []
    for m, names in configs.items():
        chosen = names[:1] if args.round == "first" else names[1:] if args.round == "rest" else names
        todo += [(m, n) for n in chosen if not (args.since and done(m, n, RESULTS, args.since))]
    start, status = time.monotonic(), 0
    for i, (m, name) in enumerate(todo):
        left = args.budget_s - (time.monotonic() - start)
        if left < 5:
            print(json.dumps({"experiment": name, "status": "skipped: the smokes' budget is spent"}), flush=True)
            continue
        share = min(left, max(args.floor_s, left / (len(todo) - i)))
        status |= gpu_smoke(m, args.steps, [], only=[name], cpu=args.cpu, seconds=share,
                            log=lambda line: print(line, flush=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
