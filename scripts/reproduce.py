"""Re-check a method's headline table:

    python scripts/reproduce.py <method> --tier {smoke,mini,paper} [--check] [--fresh] [--seeds 100,101,102] [--only EXP] [override ...]
    python scripts/reproduce.py --ci-plan [--budget-min 35]      what CI would re-run, and its minutes
    python scripts/reproduce.py --ci [--budget-min 35]           run that plan (CI), exit 1 on a failed claim
    python scripts/reproduce.py [<method>] --stale               every stale published table, held-out and
                                                                 supporting ones too (exit 1 if any)
    python scripts/reproduce.py <method> --tier paper --dry-run  build every paper-tier model on the meta device
    python scripts/reproduce.py <method> --rejudge [--held-out] [--only EXP]  judge the published record
                                                                 again (claims, controls, headline marks edited; no run)

Runs every row x seed of configs/experiment/<method>_<tier>*.yaml, judges each claim paired over
seeds (PASS / WITHIN NOISE / FAIL), writes results/<method>_<tier>.{md,json} (+ learning curves)
and prints the table; with --seeds, the held-out re-run is written beside it as
results/<method>_<tier>_heldout.*. With --check it exits 1 when a claim does not PASS. Runs whose
resolved config is unchanged are reused from runs/ (pass --fresh to rerun them).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.config import UserError, check_choices  # noqa: E402


def seed_list(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes comma-separated integers, got '{text}'")
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds needs integers >= 0, got '{text}'")
    return seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", nargs="?")
    parser.add_argument("--tier", choices=["smoke", "mini", "paper"], default="mini")
    parser.add_argument("--check", action="store_true", help="exit 1 when a claim does not PASS")
    parser.add_argument("--fresh", action="store_true", help="rerun even when a matching run exists")
    parser.add_argument("--headline", action="store_true",
                        help="only <method>_<tier>.yaml, print and check, write nothing (CI)")
    parser.add_argument("--only", type=lambda s: s.split(","), metavar="EXP[,EXP]",
                        help="run and publish only these tables of the tier (the record keeps the others)")
    parser.add_argument("--seeds", type=seed_list, help="held-out seeds, e.g. 100,101,102")
    parser.add_argument("--ci-plan", action="store_true", help="print what CI would re-run")
    parser.add_argument("--stale", action="store_true",
                        help="list every published table (supporting and held-out too) whose code or settings "
                             "moved; exit 1 when any did (with a method: only its records)")
    parser.add_argument("--ci", action="store_true", help="run the CI plan; exit 1 when a claim fails")
    parser.add_argument("--budget-min", type=float, default=35.0, help="CI's minutes for tables")
    parser.add_argument("--dry-run", action="store_true", help="paper tier: build each model on the meta device")
    parser.add_argument("--gpu-smoke", type=int, metavar="STEPS",
                        help="paper tier: STEPS steps of each config on CUDA (synthetic inputs, no compile; "
                             "--only EXP,... for some configs; JSON in benchmarks/results/gpu_<method>.json)")
    parser.add_argument("--cpu", action="store_true",
                        help="with --gpu-smoke: on the CPU, Hub architectures shrunk (the GPU check's own test)")
    parser.add_argument("--rejudge", action="store_true",
                        help="judge the published record again by the current claims (no run; refused when stale)")
    parser.add_argument("--held-out", action="store_true", help="with --rejudge: the held-out record")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. hardware=cuda")
    args = parser.parse_args()
    if not (args.method or args.ci_plan or args.ci or args.stale):
        parser.error("name a method, or pass --ci-plan / --ci / --stale")
    try:
        check_choices(args.overrides + ([f"method={args.method}"] if args.method else []))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)

    from common.runner import guarded

    def job():
        if args.ci_plan or args.ci:
            from common.reproduce.ci import describe, plan, run_plan

            entries = plan(args.budget_min)
            print(describe(entries, args.budget_min))
            return run_plan(entries, args.budget_min) if args.ci else 0
        if args.stale:
            from common.reproduce.stale import describe, stale_tables

            found = stale_tables(args.tier, [args.method] if args.method else None)
            print(describe(found))
            return 1 if any(not t.tuning for t in found) else 0
        if args.dry_run or args.gpu_smoke:
            from common.reproduce.paper import dry_run, gpu_smoke

            return dry_run(args.method, args.overrides) if args.dry_run else \
                gpu_smoke(args.method, args.gpu_smoke, args.overrides, only=args.only, cpu=args.cpu)
        from common.reproduce import rejudge_published, reproduce

        if args.rejudge:
            return rejudge_published(args.method, args.tier, args.held_out, args.check, args.overrides, args.only)
        return reproduce(args.method, args.tier, args.check, args.overrides, args.fresh, args.headline, args.seeds, args.only)

    sys.exit(guarded(job, args.debug))


if __name__ == "__main__":
    main()
