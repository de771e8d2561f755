"""The federated floor (common/federated): partitions against their random streams written out,
sampling, FedAvg against a loop, rounds, two models, resume, bad input."""
import copy

import numpy as np
import pytest
import torch

from common.federated import (client_batches, client_seed, dirichlet_partition, fedavg, federated_fit,
                              label_split, pick_clients, sample_clients, split_by_proportions)


def _labels(n_per_class=(30, 20, 50), seed=0):
    y = np.concatenate([np.full(n, c) for c, n in enumerate(n_per_class)])
    return torch.from_numpy(np.random.default_rng(seed).permutation(y))


# ---------------------------------------------------------------- partitions

def test_split_by_proportions_exact_counts_and_stream():
    y = _labels()
    p = np.array([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3]])
    parts = split_by_proportions(y, p, seed=3)
    rng = np.random.default_rng(3)
    yn = y.numpy()
    expected = [[], [], []]
    for c in range(3):
        idx = np.flatnonzero(yn == c)
        perm = idx[rng.permutation(len(idx))]
        n_c = len(idx)
        s = np.cumsum(p[c])
        bounds = [0] + [int(np.floor(n_c * s[k])) for k in range(2)] + [n_c]
        for k in range(3):
            assert (yn[parts[k]] == c).sum() == bounds[k + 1] - bounds[k]
            expected[k] += perm[bounds[k]:bounds[k + 1]].tolist()
    for k in range(3):
        assert parts[k].tolist() == sorted(expected[k])
    assert sorted(torch.cat(parts).tolist()) == list(range(len(y)))


def _dirichlet_written_out(y, K, alpha, seed, min_size, balancing):
    rng = np.random.default_rng(seed)
    n = len(y)
    while True:
        parts = [[] for _ in range(K)]
        for c in range(int(y.max()) + 1):
            idx = np.flatnonzero(y == c)
            perm = idx[rng.permutation(len(idx))]
            p = rng.dirichlet([alpha] * K)
            if balancing:
                held = np.array([len(q) for q in parts])
                q = p.copy()
                q[held >= n / K] = 0
                if q.sum() > 0:
                    p = q / q.sum()
            cuts = [int(np.floor(len(perm) * v)) for v in np.cumsum(p)[:-1]]
            for k, piece in enumerate(np.split(perm, cuts)):
                parts[k] += piece.tolist()
        if min(len(q) for q in parts) >= min_size:
            return [sorted(q) for q in parts]


@pytest.mark.parametrize("balancing", [False, True])
def test_dirichlet_partition_matches_its_stream_with_retries(balancing):
    y = _labels((40, 40, 40, 40, 40))
    # min_size high enough that the first tries fail (alpha small -> skewed)
    got = dirichlet_partition(y, 4, 0.3, seed=0, min_size=25, self_balancing=balancing)
    want = _dirichlet_written_out(y.numpy(), 4, 0.3, 0, 25, balancing)
    assert [g.tolist() for g in got] == want
    assert min(len(g) for g in got) >= 25


def test_dirichlet_partition_retries_happened():
    y = _labels((40, 40, 40, 40, 40))
    rng = np.random.default_rng(0)   # the first try alone, written out, fails min_size 25
    sizes = np.zeros(4, int)
    for c in range(5):
        rng.permutation(40)
        p = rng.dirichlet([0.3] * 4)
        cuts = np.floor(40 * np.cumsum(p)[:-1]).astype(int)
        sizes += np.diff(np.concatenate([[0], cuts, [40]]))
    assert sizes.min() < 25   # so the test above exercised the retry


def test_self_balancing_evens_out_sizes():
    y = _labels(tuple([100] * 10))
    spread = {}
    for bal in (False, True):
        sizes = [np.std([len(p) for p in dirichlet_partition(y, 8, 0.2, seed=s, self_balancing=bal)])
                 for s in range(10)]
        spread[bal] = np.mean(sizes)
    assert spread[True] < spread[False]


def test_skew_grows_as_alpha_falls():
    y = _labels(tuple([200] * 10))

    def mean_entropy(alpha):
        ent = []
        for s in range(5):
            for part in dirichlet_partition(y, 10, alpha, seed=s):
                h = np.bincount(y[part].numpy(), minlength=10) / max(len(part), 1)
                h = h[h > 0]
                ent.append(-(h * np.log(h)).sum())
        return np.mean(ent)

    e = [mean_entropy(a) for a in (0.05, 0.5, 100.0)]
    assert e[0] < e[1] < e[2]
    assert e[2] > 0.95 * np.log(10)   # large alpha: nearly iid


def test_label_split_counts_and_partial_clients():
    parts = [torch.arange(0, 10), torch.arange(10, 23), torch.arange(23, 30)]
    lab, unl = label_split(parts, 0.3, seed=1)
    rng = np.random.default_rng(1)
    for part, l_, u_ in zip(parts, lab, unl):
        perm = rng.permutation(len(part))
        m = int(np.floor(0.3 * len(part) + 1e-9))
        assert l_.tolist() == sorted(part[perm[:m]].tolist())
        assert u_.tolist() == sorted(part[perm[m:]].tolist())
    lab, unl = label_split(parts, [1, 0, 1], seed=1)
    assert [len(x) for x in lab] == [10, 0, 7] and [len(x) for x in unl] == [0, 13, 0]
    # 0.3 * 10 = 3.0000000000000004 and 0.7 * 10 = 6.999999999999999: floor with 1e-9
    lab, _ = label_split([torch.arange(10)], 0.7, seed=0)
    assert len(lab[0]) == 7


# ---------------------------------------------------------------- sampling

def test_sampling_is_seeded_per_round_and_pure():
    got = sample_clients(20, 5, round=3, seed=7)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(7 * 100_003 + 3))
    assert got == sorted(perm[:5].tolist())
    assert got == sample_clients(20, 5, 3, 7)            # pure in the round
    assert got != sample_clients(20, 5, 4, 7)
    assert pick_clients(4, 4, 0) == [0, 1, 2, 3]
    assert client_seed(2, 3, 4) == (2 * 100_003 + 3) * 10_007 + 4


def test_client_batches_cover_each_epoch_and_keep_the_last_partial_batch():
    b = client_batches(23, 5, 2, seed=4)
    assert [len(x) for x in b] == [5, 5, 5, 5, 3] * 2
    assert sorted(torch.cat(b[:5]).tolist()) == list(range(23))
    assert torch.equal(torch.cat(b[5:]), torch.randperm(23, generator=torch.Generator().manual_seed(4 * 100_003 + 1)))


# ---------------------------------------------------------------- fedavg

def test_fedavg_against_a_loop_and_integer_entries():
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)) for _ in range(3)]
    for k, n in enumerate(nets):
        n[1].num_batches_tracked += k + 1
    states = [n.state_dict() for n in nets]
    w = [2.0, 5.0, 3.0]
    out = fedavg(states, w)
    for key in states[0]:
        if key.endswith("num_batches_tracked"):
            assert out[key] == states[1][key]       # from the largest weight
            continue
        loop = torch.zeros_like(states[0][key], dtype=torch.float64)
        for s, wk in zip(states, w):
            loop += s[key].double() * wk / sum(w)
        assert out[key].dtype == states[0][key].dtype
        assert torch.allclose(out[key].double(), loop, atol=1e-7)
    ties = fedavg(states, [1.0, 1.0, 1.0])
    assert ties["1.num_batches_tracked"] == states[0]["1.num_batches_tracked"]   # first on ties


@pytest.mark.parametrize("weights, match", [([1.0, -1.0], "non-negative"), ([0.0, 0.0], "not all zero")])
def test_fedavg_bad_weights(weights, match):
    s = torch.nn.Linear(2, 2).state_dict()
    with pytest.raises(ValueError, match=match):
        fedavg([s, s], weights)


def test_fedavg_mismatched_keys():
    with pytest.raises(ValueError, match="mismatched keys"):
        fedavg([torch.nn.Linear(2, 2).state_dict(), {"weight": torch.zeros(2, 2)}], [1, 1])


# ---------------------------------------------------------------- federated_fit

class Shift:
    """A local update whose result is known: client k adds (k + 1) to every parameter, plus noise
    from the seeded global RNG (so the seeding is part of what is tested); a state for resume."""

    def __init__(self):
        self.calls = 0

    def __call__(self, client, r, copies):
        self.calls += 1
        noise = float(torch.rand(()))
        with torch.no_grad():
            for m in copies.values():
                for p in m.parameters():
                    p += client + 1 + noise
        return {"loss": float(client), "noise": noise}

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, s):
        self.calls = s["calls"]


def test_one_round_is_the_weighted_mean_of_the_client_updates():
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    sizes = [10, 30, 60]
    hist = federated_fit({"model": net}, sizes, Shift(), rounds=1, clients_per_round=3, seed=1)
    noises = []
    for k in range(3):
        torch.manual_seed(client_seed(1, 0, k))
        noises.append(float(torch.rand(())))
    shift = sum(n * (k + 1 + z) for k, (n, z) in enumerate(zip(sizes, noises))) / sum(sizes)
    for key, v in net.state_dict().items():
        assert torch.allclose(v, before[key] + shift, atol=1e-6)
    assert hist[0]["round"] == 1 and hist[0]["clients"] == [0, 1, 2]
    assert hist[0]["train/loss"] == pytest.approx((0 * 10 + 1 * 30 + 2 * 60) / 100)
    uni = torch.nn.Linear(2, 1)
    b2 = {k: v.clone() for k, v in uni.state_dict().items()}
    federated_fit({"model": uni}, sizes, Shift(), rounds=1, clients_per_round=3, seed=1, weighting="uniform")
    mean_shift = sum(k + 1 + z for k, z in enumerate(noises)) / 3
    assert torch.allclose(uni.weight, b2["weight"] + mean_shift, atol=1e-6)


def test_two_models_are_averaged_each_by_name_and_eval_every():
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(3, 1)
    a0, b0 = a.weight.clone(), b.weight.clone()
    seen = []
    hist = federated_fit({"sup": a, "unsup": b}, [5, 5, 5, 5], Shift(), rounds=5, clients_per_round=2, seed=0,
                         evaluate=lambda models, r: seen.append((r, models["sup"].training)) or {"w": 1.0},
                         eval_every=2)
    assert [r for r, _ in seen] == [1, 3, 4] and not any(t for _, t in seen)   # eval mode
    assert a.training
    assert ["eval/w" in h for h in hist] == [False, True, False, True, True]
    # each round both models moved by the same mean shift
    assert torch.allclose(a.weight - a0, (b.weight - b0).mean() * torch.ones_like(a0), atol=1e-5)


def _curve(tmp_path, rounds, resume, ckpt_every=2, logged=None):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x, y = torch.randn(40, 3), torch.randn(40, 1)
    parts = [torch.arange(0, 10), torch.arange(10, 25), torch.arange(25, 40)]

    def local(client, r, copies):
        m = copies["model"]
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for batch in client_batches(len(parts[client]), 4, 1, client_seed(3, r, client)):
            idx = parts[client][batch]
            loss = ((m(x[idx]) - y[idx]) ** 2).mean() + 0.01 * torch.randn(())   # the seeded global RNG
            opt.zero_grad()
            loss.backward()
            opt.step()
        return {"loss": float(loss.detach())}

    hist = federated_fit({"model": net}, [10, 15, 15], local, rounds=rounds, clients_per_round=2, seed=3,
                         evaluate=lambda ms, r: {"mse": float(((ms["model"](x) - y) ** 2).mean())},
                         ckpt_path=tmp_path / "fed.pt", ckpt_every=ckpt_every, resume=resume, log=logged)
    return hist, net.state_dict()


def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(tmp_path):
    full, state = _curve(tmp_path / "a", 6, False)
    _curve(tmp_path / "b", 3, False, ckpt_every=1)         # interrupted after 3 rounds
    resumed, state_r = _curve(tmp_path / "b", 6, True)
    assert resumed == full
    for k in state:
        assert torch.equal(state[k], state_r[k])
    again, _ = _curve(tmp_path / "b", 6, True)             # a finished run resumes to its history
    assert again == full


def test_resume_restores_the_local_update_state(tmp_path):
    upd = Shift()
    federated_fit({"m": torch.nn.Linear(1, 1)}, [1, 1], upd, rounds=2, clients_per_round=2, seed=0,
                  ckpt_path=tmp_path / "c.pt")
    fresh = Shift()
    federated_fit({"m": torch.nn.Linear(1, 1)}, [1, 1], fresh, rounds=3, clients_per_round=2, seed=0,
                  ckpt_path=tmp_path / "c.pt", resume=True)
    assert fresh.calls == 6


@pytest.mark.parametrize("kw, match", [
    (dict(clients_per_round=4), "clients_per_round=4"),
    (dict(weighting="median"), "median"),
    (dict(client_sizes=[-1, 2, 3]), "non-negative"),
])
def test_federated_fit_bad_input(kw, match):
    args = dict(client_sizes=[1, 2, 3], rounds=1, clients_per_round=2, seed=0)
    args.update(kw)
    sizes = args.pop("client_sizes")
    with pytest.raises(ValueError, match=match):
        federated_fit({"m": torch.nn.Linear(1, 1)}, sizes, Shift(), **args)


@pytest.mark.parametrize("call, match", [
    (lambda y: dirichlet_partition(y, 3, 0.0, 0), "alpha"),
    (lambda y: dirichlet_partition(y, 3, -1.0, 0), "alpha"),
    (lambda y: dirichlet_partition(y, 0, 0.5, 0), "num_clients"),
    (lambda y: dirichlet_partition(y, 4, 0.5, 0, min_size=30), "min_size=30"),
    (lambda y: dirichlet_partition(y, 4, 0.01, 0, min_size=20, max_tries=3), "3 tries"),
    (lambda y: label_split([torch.arange(3)], 1.5, 0), "1.5"),
    (lambda y: label_split([torch.arange(3)], [-0.1], 0), "-0.1"),
    (lambda y: split_by_proportions(y, [[0.5, 0.4], [1, 0], [1, 0]], 0), "sum to 1"),
    (lambda y: pick_clients(3, 4, 0), "4 clients"),
])
def test_partition_and_sampling_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call(_labels())


def test_deep_copies_leave_the_global_model_untouched_during_the_round():
    net = torch.nn.Linear(2, 2)
    w0 = net.weight.clone()
    seen = []

    def local(client, r, copies):
        seen.append(torch.equal(net.weight, w0))
        with torch.no_grad():
            copies["m"].weight += 1
        return None

    federated_fit({"m": net}, [1, 1, 1], local, rounds=1, clients_per_round=3, seed=0)
    assert seen == [True, True, True] and torch.allclose(net.weight, w0 + 1)
    copy.deepcopy(net)
