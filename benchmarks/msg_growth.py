"""MSG (issue #48): (1) msg against scratch in one process, msg_mini's setting (seed 0): the wall
time and training FLOPs msg needs to reach scratch's final validation loss, as ratios of scratch's
(target >= 1.4x); (2) the masked forward+backward during a ramp (MSGGPT, masks 0.5) against the
plain GPT of the same size (target <= 1.3x). Time to reach is measured both as wall time and as the
process's CPU time (the CPU ratio is the one to read on a shared machine: wall time there includes
waiting for a core).

    python benchmarks/msg_growth.py [--quick]  -> table + benchmarks/results/msg_growth.json
"""
import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from common.config import compose_checked  # noqa: E402
from common.data.text import consecutive_windows  # noqa: E402
from common.data.sampler import StepSampler  # noqa: E402
from common.nn.gpt import GPT  # noqa: E402
from methods.msg import build, corpus, grow, set_growth_mask, train, train_flops, val_loss  # noqa: E402
from methods.msg.train import _msg_stage_steps  # noqa: E402


def curve(mode: str, cfg, every: int):
    """[(step, train wall seconds so far, val loss, train CPU seconds so far)] every `every` steps
    (evaluation time excluded from both clocks)."""
    cfg.method.msg.mode = mode
    torch.manual_seed(0)
    _, train_ids, val_ids = corpus(str(cfg.method.data.source), float(cfg.method.data.val_fraction),
                                   int(cfg.method.data.split_seed))
    t = int(cfg.method.model.n_positions)
    windows = consecutive_windows(val_ids, t)[: int(cfg.method.eval_windows)]
    sampler, span = StepSampler(len(train_ids) - t, int(cfg.trainer.batch_size), 0, 0, 1), torch.arange(t)
    points = []
    clock = {"start": time.perf_counter(), "eval": 0.0, "cpu_start": time.process_time(), "cpu_eval": 0.0}

    def on_step(model, step):
        if step % every == 0 or step == int(cfg.trainer.max_steps):
            t0, c0 = time.perf_counter(), time.process_time()
            points.append((step, t0 - clock["start"] - clock["eval"], val_loss(model, windows),
                           c0 - clock["cpu_start"] - clock["cpu_eval"]))
            clock["eval"] += time.perf_counter() - t0
            clock["cpu_eval"] += time.process_time() - c0

    train(cfg, SimpleNamespace(seed=0, device=torch.device("cpu")), build(cfg),
          lambda s: train_ids[sampler(s)[:, None] + span], windows[:16], on_step=on_step)
    return points


def to_reach(points, level):
    """(step, wall s, CPU s) of the first evaluation at or below `level`, or Nones."""
    return next(((s, w, c) for s, w, v, c in points if v <= level), (None, None, None))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    over = ["experiment=msg_mini"] + (["trainer.max_steps=60", "method.msg.s1=10", "method.msg.s2=30",
                                       "method.msg.ramp=10"] if args.quick else [])
    cfg = compose_checked(over)
    n, b, t = int(cfg.trainer.max_steps), int(cfg.trainer.batch_size), int(cfg.method.model.n_positions)
    every = 10
    scratch, msg = curve("scratch", cfg.copy(), every), curve("msg", cfg.copy(), every)
    level = scratch[-1][2]
    step, wall, cpu = to_reach(msg, level)
    start = build(cfg)
    stages = _msg_stage_steps(cfg, start)
    target = stages[-1][0]
    if step is None:
        flops_msg = None
    else:   # msg's FLOPs up to `step`
        done, flops_msg = 0, 0
        for c, k in stages:
            take = max(0, min(k, step - done))
            flops_msg += train_flops([(c, take, b, t)])
            done += k
    flops_scratch = train_flops([(target, n, b, t)])
    speed = {"scratch_final_val_loss": level, "msg_final_val_loss": msg[-1][2], "msg_steps_to_reach": step,
             "wall_ratio": scratch[-1][1] / wall if wall else None,
             "cpu_ratio": scratch[-1][3] / cpu if cpu else None,
             "flop_ratio": flops_scratch / flops_msg if flops_msg else None,
             "scratch_wall_s": scratch[-1][1], "msg_wall_s_to_reach": wall,
             "scratch_cpu_s": scratch[-1][3], "msg_cpu_s_to_reach": cpu}
    # (2) masked forward + backward in a ramp against the plain GPT of the target size
    torch.manual_seed(0)
    small = GPT(start.config)
    masked = grow(small, n_embd=target.n_embd, n_head=target.n_head, n_inner=target.inner, n_layer=target.n_layer)
    set_growth_mask(masked, 0.5)
    plain = GPT(target)
    x = torch.randint(start.config.vocab_size, (b, t))

    def step_of(model):
        return lambda: model(x, labels=x).loss.backward()
    times = interleaved({"plain": step_of(plain), "masked": step_of(masked)}, 5 if args.quick else 21, warmup=2)
    overhead = {"plain_ms": 1e3 * times["plain"], "masked_ms": 1e3 * times["masked"],
                "ratio": times["masked"] / times["plain"]}
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"   # noqa: E731
    lines = ["| quantity | value | target |", "|---|---|---|",
             f"| scratch final val loss ({n} steps) | {level:.3f} | |",
             f"| msg reaches it at step | {step} | |",
             f"| wall-time speedup (scratch / msg to reach) | {fmt(speed['wall_ratio'])} | >= 1.4 |",
             f"| CPU-time speedup (scratch / msg to reach) | {fmt(speed['cpu_ratio'])} | >= 1.4 |",
             f"| FLOP speedup (scratch / msg to reach) | {fmt(speed['flop_ratio'])} | >= 1.4 |",
             f"| masked step / plain step (ramp, masks 0.5) | {overhead['ratio']:.2f} | <= 1.3 |",
             "", f"One process, {torch.get_num_threads()} CPU thread, seed 0, msg_mini's setting (msg's LR "
             f"`lr_rewind: {cfg.method.msg.lr_rewind}`, scratch one cosine); validation loss "
             f"every {every} steps (evaluation time excluded); masked/plain: median of interleaved forward+backward "
             "steps of the target size."]
    table = "\n".join(lines)
    print(table)
    payload = {"speed": speed, "overhead": overhead, "msg_curve": msg, "scratch_curve": scratch, "quick": args.quick}
    save("msg_growth_quick" if args.quick else "msg_growth", payload, None if args.quick else table)


if __name__ == "__main__":
    main()
