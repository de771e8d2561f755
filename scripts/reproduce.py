"""Re-check a method's headline table:

    python scripts/reproduce.py <method> --tier {smoke,mini,paper} [--check] [--fresh] [override ...]

Runs every row x seed of configs/experiment/<method>_<tier>*.yaml, writes
results/<method>_<tier>.{md,json} (+ a PNG of learning curves) and prints the table.
With --check it exits 1 when a claim fails. Runs whose resolved config is unchanged are
reused from runs/ (pass --fresh to rerun them).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.config import UserError, check_choices  # noqa: E402
from common.reproduce import reproduce  # noqa: E402
from common.runner import guarded  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method")
    parser.add_argument("--tier", choices=["smoke", "mini", "paper"], default="mini")
    parser.add_argument("--check", action="store_true", help="exit 1 when a claim fails")
    parser.add_argument("--fresh", action="store_true", help="rerun even when a matching run exists")
    parser.add_argument("--headline", action="store_true",
                        help="only <method>_<tier>.yaml, print and check, write nothing (CI)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. hardware=cuda")
    args = parser.parse_args()
    try:
        check_choices(args.overrides + [f"method={args.method}"])
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    sys.exit(guarded(lambda: reproduce(args.method, args.tier, args.check, args.overrides, args.fresh,
                                       args.headline),
                     args.debug))


if __name__ == "__main__":
    main()
