"""Pilot (issue #35, P²OT features; methods/p2ot/README "Pilot"): SimCLR for P²OT's frozen encoder at
a given temperature, crop scale, steps and width, with the weighted kNN accuracy of 2,000 held-back
eval_train images voted by the other 8,000 (not the test split) at a third, two thirds and the end.
Not a timing benchmark and not a table: run as it was for the README's numbers.

    OMP_NUM_THREADS=1 python benchmarks/p2ot_simclr_knn_pilot.py TAU MIN_SCALE STEPS WIDTH   (0.5 0.3 600 16)
"""
import sys, time, math, json
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
import torch
from common.config import compose_checked
from common.data import image_splits
from common.eval.knn import knn_accuracy
from methods.p2ot import build
torch.set_num_threads(1)
tau, min_scale, steps, width = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cfg = compose_checked(["experiment=p2ot_mini", f"method.encoder.temperature={tau}",
                       f"method.encoder.augment.min_scale={min_scale}", f"method.backbone.width={width}"])
sp = image_splits(cfg.dataset)
x, y = sp["train"]
ex, ey = sp["eval_train"]
bank, query = (ex[:8000], ey[:8000]), (ex[8000:], ey[8000:])
torch.manual_seed(0)
model = build(cfg)["encoder"]
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-6)
g = torch.Generator().manual_seed(0)
def knn():
    model.eval()
    with torch.no_grad():
        f = [torch.cat([model.features(a[i:i+1024]).float() for i in range(0, len(a), 1024)]) for a, _ in (bank, query)]
    model.train()
    return knn_accuracy(f[0], bank[1].long(), f[1], query[1].long(), k=20, temperature=0.07)
t0 = time.process_time(); out = {}
for step in range(steps):
    lr = 2e-3 * min(1, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / steps))
    for gr in opt.param_groups: gr["lr"] = lr
    idx = torch.randint(0, len(x), (256,), generator=g)
    loss, _ = model.training_step(x[idx])
    opt.zero_grad(); loss.backward(); opt.step()
    if (step + 1) % (steps // 3) == 0 or step + 1 == steps:
        out[step + 1] = knn(); print(step + 1, round(loss.item(), 3), out[step + 1], round(time.process_time() - t0), flush=True)
print(json.dumps({"tau": tau, "min_scale": min_scale, "steps": steps, "width": width, "knn": out}))
