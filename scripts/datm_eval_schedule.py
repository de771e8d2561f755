"""DATM deviation check (issue #44): the floor's `evaluate_synthetic` schedule vs the official
`evaluate_synset` (NUS-HPC-AI-Lab/DATM utils/utils_baseline.py, as MTT's): E + 1 epochs, lr x 0.1
after epoch E//2 + 1 with a NEW SGD (momentum buffer restarted at zero). Same nets (init seed
seed*1000 + k), same batches, same sets; validation split, tuning seeds only. Prints the paired gap.

    OMP_NUM_THREADS=1 python scripts/datm_eval_schedule.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hydra import compose, initialize_config_dir  # noqa: E402

from common.config import CONFIG_DIR  # noqa: E402
from common.distill import evaluate_synthetic, expert_buffer  # noqa: E402
from common.distill.evaluate import _batches, _net_seed, _test_acc  # noqa: E402
from common.distill.unroll import target_loss  # noqa: E402
from methods.datm import DATM, build, buffer_settings, distill_splits, real_subset  # noqa: E402

SEEDS, NETS, EPOCHS, BATCH = (10, 11, 12), 3, 300, 256
with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
    CFG = compose("train", overrides=["experiment=datm_mini", "method.eval_on=val"])


def make_net():
    return build(CFG)


def official(x, t, xe, ye, lr, seed):
    """Official evaluate_synset written out (no DSA): Epoch + 1 epochs, decay with a fresh optimiser."""
    accs = []
    for k in range(NETS):
        torch.manual_seed(_net_seed(seed, k))
        net, gen, cur = make_net(), torch.Generator().manual_seed(_net_seed(seed, k)), lr
        opt = torch.optim.SGD(net.parameters(), lr=cur, momentum=0.9, weight_decay=5e-4)
        net.train()
        for ep in range(EPOCHS + 1):
            for idx in _batches(len(x), BATCH, gen):
                opt.zero_grad(set_to_none=True)
                target_loss(net(x[idx]), t[idx]).backward()
                opt.step()
            if ep == EPOCHS // 2 + 1:
                cur *= 0.1
                opt = torch.optim.SGD(net.parameters(), lr=cur, momentum=0.9, weight_decay=5e-4)
        net.eval()
        accs.append(_test_acc(net, xe, ye))
    return sum(accs) / len(accs)


def main() -> None:
    m, d = CFG.method, CFG.dataset
    (x, y), (xe, ye) = distill_splits(d.name, d.root, d.download, m.eval_on, m.val_share, m.preprocess, m.zca_eps)
    buffer = expert_buffer(buffer_settings(CFG), x, y, make_net, m.cache_dir)
    rows = []
    for ipc, lr in ((1, 0.01), (10, 0.01), (10, 0.036)):
        for kind in ("random", "datm_init"):
            for seed in SEEDS:
                if kind == "random":
                    idx = real_subset("random", x, y, ipc, seed)
                    sx, st = x[idx], y[idx]
                else:
                    datm = DATM(ipc=ipc)
                    init = datm.initial_set(make_net(), buffer, x, y, torch.Generator().manual_seed(seed))
                    sx, st = init.images.detach(), init.targets.detach()
                floor = evaluate_synthetic(make_net, sx, st, xe, ye, lr, NETS, EPOCHS, BATCH, seed)["acc_mean"]
                off = official(sx, st, xe, ye, lr, seed)
                rows.append((ipc, lr, kind, seed, floor, off))
                print(f"ipc={ipc} lr={lr} {kind} seed={seed}: floor {floor:.2f} official {off:.2f} "
                      f"gap {off - floor:+.2f}", flush=True)
    gaps = torch.tensor([r[5] - r[4] for r in rows])
    print(f"all {len(rows)}: official - floor mean {gaps.mean():+.2f}, std {gaps.std():.2f}, "
          f"max |gap| {gaps.abs().max():.2f}")


if __name__ == "__main__":
    main()
