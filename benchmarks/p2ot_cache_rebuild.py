"""Reproducibility check (issue #35, P²OT's cached models; methods/p2ot/README "Cached encoder"): build the
cached SimCLR encoder and supervised reference of a table's config from scratch, in an EMPTY cache dir, inside a
run whose seed differs from the one that built the published cache, and compare them bit for bit (every tensor of
the state dict, and the stored kNN accuracy) with the cache in `--against`. Not a timing benchmark and not a table.

    OMP_NUM_THREADS=1 python benchmarks/p2ot_cache_rebuild.py --against cache/p2ot --into /tmp/empty --seed 5 [--encoder-only]
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch  # noqa: E402

from common.config import compose_checked  # noqa: E402
from common.data import image_splits  # noqa: E402
from common.runner import open_run  # noqa: E402
from methods.p2ot import pretrain_encoder, supervised_reference  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--against", required=True, help="the cache dir to compare with (e.g. cache/p2ot)")
p.add_argument("--into", required=True, help="an empty dir the caches are rebuilt in")
p.add_argument("--seed", type=int, default=5, help="the run seed of the rebuilding run")
p.add_argument("--experiment", default="p2ot_mini")
p.add_argument("--encoder-only", action="store_true", help="rebuild the SimCLR encoder only (not the reference)")
a = p.parse_args()
into = Path(a.into)
if into.exists() and any(into.iterdir()):
    raise SystemExit(f"--into {into} is not empty")
cfg = compose_checked([f"experiment={a.experiment}", f"seed={a.seed}", f"method.encoder_cache.dir={into}",
                       f"run_dir={into.parent / (into.name + '_run')}", "hardware.threads=1"])
t0 = time.process_time()
out = {"experiment": a.experiment, "run_seed": a.seed}
with open_run(cfg) as ctx:
    torch.manual_seed(a.seed)                     # what the runner does: the building run's own RNG
    splits = image_splits(cfg.dataset)
    knn_data = (splits["eval_train"], splits["test"])
    _, enc = pretrain_encoder(cfg, ctx, splits["train"][0], knn_data)
    built = {"encoder": enc}
    if not a.encoder_only:
        built["supervised"] = supervised_reference(cfg, ctx, *splits["train"], knn_data)[1]
out["cpu_s"] = round(time.process_time() - t0, 1)
for stage, info in built.items():
    (new,) = sorted(into.glob(f"{stage}-*.pt"))
    old = Path(a.against) / new.name
    row = {"file": new.name, "built": not info["cached"], "knn_acc": info["knn_acc"], "published_exists": old.exists()}
    if old.exists():
        s_new, s_old = (torch.load(f, weights_only=True) for f in (new, old))
        row |= {"published_knn_acc": s_old["info"]["knn_acc"],
                "bit_identical": s_new["model"].keys() == s_old["model"].keys()
                and all(torch.equal(s_new["model"][k], s_old["model"][k]) for k in s_new["model"]),
                "max_abs_diff": max((s_new["model"][k].double() - s_old["model"][k].double()).abs().max().item()
                                    for k in s_new["model"])}
    out[stage] = row
print(json.dumps(out, indent=1))
