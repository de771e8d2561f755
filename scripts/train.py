"""Train one method: python scripts/train.py method=<name> [dataset=..] [hardware=..] [experiment=..] [seed=..] [resume=true]

Prints the final metrics as one JSON line on stdout and writes metrics.json, config.yaml and
results.json (with provenance) into the run dir (runs/<run_name>/seed<seed> by default).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a plain checkout too

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from common.config import CONFIG_DIR, UserError, check_choices  # noqa: E402
from common.runner import guarded, run_method  # noqa: E402


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> None:
    metrics = guarded(lambda: run_method(cfg), bool(cfg.debug))
    print(json.dumps(metrics))


if __name__ == "__main__":
    try:
        check_choices(sys.argv[1:])
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    main()
