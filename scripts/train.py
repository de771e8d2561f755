"""Train one method: python scripts/train.py method=<name> [dataset=..] [hardware=..] [experiment=..] [seed=..] [resume=true]

Prints the final metrics as one JSON line on stdout (rank 0 only under torchrun) and writes metrics.json, config.yaml and
results.json (with provenance) into the run dir (runs/<run_name>/seed<seed> by default).
Bad input (an unknown choice or key, a value of the wrong type or range) is one paragraph on
stderr and exit 2, before anything is built.
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a plain checkout too

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from common.config import CONFIG_DIR, UserError, compose_checked  # noqa: E402  (light: no torch)

# Hydra's own flags (with the ones that take a value): not overrides, left to Hydra
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--info", "-i", "--experimental-rerun"}
_INSPECT = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc"}


def overrides_of(argv: list[str]) -> list[str] | None:
    """The key=value overrides of a command line; None when Hydra is asked to print, not run."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _INSPECT:
            return None
        if arg.startswith("-"):
            skip = arg in _FLAGS_WITH_VALUE
            continue
        out.append(arg)
    return out


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> None:
    from common.runner import guarded, run_method  # torch is imported only once the config is good

    metrics = guarded(lambda: run_method(cfg), bool(cfg.debug))
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun every rank holds the same metrics:
        print(json.dumps(metrics), flush=True)  # one line, or two ranks' writes interleave on stdout


if __name__ == "__main__":
    overrides = overrides_of(sys.argv[1:])
    if overrides is not None:
        try:
            from common.target_types import check_targets   # the method's own knobs, by signature

            check_targets(compose_checked(overrides))
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(err.exit_code)
    main()
