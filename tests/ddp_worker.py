"""Run by tests/test_ddp.py under torchrun: train the tiny model with hardware=ddp semantics."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from common.hardware import Hardware, teardown  # noqa: E402
from common.logging import MetricLogger  # noqa: E402
from common.trainer import Trainer  # noqa: E402
from tests.trainer_fixtures import TinyRegressor, batch_fn, data, trainer_cfg  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
cfg = trainer_cfg(ckpt_every=0, clip_grad=None)
x, y = data()
hw = Hardware(device=torch.device("cpu"), rank=rank, world_size=world)
out = Path(sys.argv[1])
logger = MetricLogger(out, OmegaConf.create({"kind": "jsonl"}), enabled=rank == 0)
trainer = Trainer(TinyRegressor(dropout=0.0), cfg, hw, out, logger, batch_fn(x, y, cfg, rank, world))
trainer.fit()
if rank == 0:
    (out / "params.json").write_text(json.dumps([p.detach().flatten().tolist() for p in trainer.model.parameters()]))
# Free the DDP reducer (it holds the gloo group) while the interpreter is alive: left to
# interpreter shutdown, gloo threads are destroyed mid-teardown and the rank aborts
# ("terminate called without an active exception", ~1 run in 15 before this).
del trainer
teardown()
