"""Pilot (issue #35, P²OT features; methods/p2ot/README "Features that meet the kNN target"): cluster
the features of the supervised SmallCNN reference (the kNN target the SimCLR encoder misses) with
k-means and the four pseudo-labelling rules, on the validation split with tuning seeds 10-12 and
every other setting of p2ot_mini_tune (head, solver, lambda = 1). With LAMBDAS, only UOT and P²OT
run, at each of those KL weights. Not a table. As it ran for the README (the reference's
initialisation is not seeded; the trained reference is cached at /tmp/p2ot_feat/sup_net.pt).

    OMP_NUM_THREADS=1 python benchmarks/p2ot_supervised_features_pilot.py 100          (lambda = 1, all rules)
    OMP_NUM_THREADS=1 python benchmarks/p2ot_supervised_features_pilot.py 100 3,10     (UOT, P²OT at 3 and 10)
"""
import sys, time, math, json
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
import torch
from common.config import compose_checked
from common.data import image_splits, load
from common.instantiate import instantiate
from methods.p2ot import (clustered_pool, long_tailed_indices, view_features, plain_features,
                          kmeans_clusters, evaluate_clusters, train_head, predict_clusters, sorted_sizes, SupervisedNet)
from methods.p2ot.encoder import encoder_knn
torch.set_num_threads(1)
ratio = float(sys.argv[1]) if len(sys.argv) > 1 else 100
lams = [float(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [None]
cfg = compose_checked(["experiment=p2ot_mini", "method.cluster_split=val", f"method.imbalance_ratio={ratio}"])
m, k = cfg.method, 10
t0 = time.process_time()
sp = image_splits(cfg.dataset)
x, y = sp["train"]
enc, d = instantiate(m.backbone, in_chans=1, img_size=28)
net = SupervisedNet(enc, d, k)
torch.manual_seed(0); g = torch.Generator().manual_seed(0)
opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
steps = int(m.reference.steps)
import os
cache = "/tmp/p2ot_feat/sup_net.pt"
os.makedirs(os.path.dirname(cache), exist_ok=True)
if os.path.exists(cache):
    net.load_state_dict(torch.load(cache)); steps = 0
for step in range(steps):
    lr = 2e-3 * min(1, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / steps))
    for gr in opt.param_groups: gr["lr"] = lr
    idx = torch.randint(0, len(x), (256,), generator=g)
    loss, _ = net.training_step((x[idx], y[idx]))
    opt.zero_grad(); loss.backward(); opt.step()
torch.save(net.state_dict(), cache)
net.eval().requires_grad_(False)
knn = encoder_knn(net, sp["eval_train"], sp["test"], k=20, temperature=0.07)
print("supervised knn", knn, "cpu", round(time.process_time() - t0), flush=True)
train_x, train_y = load(cfg.dataset.name, "train", cfg.dataset.root, cfg.dataset.download)
test_x, test_y = sp["test"]
pool = clustered_pool(len(train_y), "val", m.val_size)
features = lambda im: net.features(im).cpu()
out = {"knn": knn, "ratio": ratio, "seeds": {}}
for seed in (10, 11, 12):
    lt = pool[long_tailed_indices(train_y[pool], m.imbalance_ratio, m.max_per_class, seed)]
    lt_x, lt_y = train_x[lt], train_y[lt]
    views = view_features(features, lt_x, m.views, instantiate(m.encoder.augment), seed, m.feature_batch_size)
    lt_f = plain_features(features, lt_x, m.feature_batch_size)
    te_f = plain_features(features, test_x, m.feature_batch_size)
    res = {}
    km_tr, km_te = kmeans_clusters(lt_f, te_f, k, seed, m.kmeans_n_init)
    res["kmeans"] = evaluate_clusters(km_tr, lt_y, km_te, test_y, k) | {"sizes": sorted_sizes(km_tr, k)}
    for lam in lams:
     for row, rule in m.rules.items():
        if lam is not None:
            if row in ("sela", "pot"): continue
            row = f"{row}_lam{lam:g}"; rule = dict(rule, kl_weight=lam)
            rule = type("R", (), rule)
        torch.manual_seed(seed)
        head = instantiate(m.head, in_dim=views.shape[-1], num_clusters=k)
        loop = {kk: v for kk, v in m.clustering.items() if kk != "optimizer"}
        head, hist = train_head(views, head, **loop, optimizer=instantiate(m.clustering.optimizer),
                                rho_start=rule.rho_start, rho_end=rule.rho_end, kl_weight=float(rule.kl_weight), seed=seed)
        pred = predict_clusters(head, lt_f)
        res[row] = evaluate_clusters(pred, lt_y, predict_clusters(head, te_f), test_y, k) | {"sizes": sorted_sizes(pred, k)}
    res["classes"] = sorted_sizes(lt_y, k)
    out["seeds"][seed] = res
    print(seed, {r: (round(v["macc"], 1), round(v["nmi"], 1), round(v["f1"], 1)) for r, v in res.items() if r != "classes"},
          "cpu", round(time.process_time() - t0), flush=True)
json.dump(out, open(f"/tmp/p2ot_feat/supfeat_r{int(ratio)}_{sys.argv[2] if len(sys.argv) > 2 else 'all'}.json", "w"), indent=1)
