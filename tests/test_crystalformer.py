"""Crystalformer: the image-softmax attention equals the paper's α/β formulation written as
loops over atoms, atoms and translations; predictions are invariant to supercells, rotations,
translations and atom permutations; the generated Ewald set and the loaders."""
import math

import numpy as np
import pytest
import torch

from methods.crystalformer import Crystalformer, PeriodicAttention, collate
from common.kernels.periodic_attention.reference import group_softmax
from methods.crystalformer.attention import rbf, shifted_elu

pytest.importorskip("pymatgen")


def rock_salt(a=5.64):
    """NaCl conventional cell (8 atoms), lattice rows a·I."""
    frac = np.array([[0, 0, 0], [0, .5, .5], [.5, 0, .5], [.5, .5, 0],
                     [.5, 0, 0], [0, .5, 0], [0, 0, .5], [.5, .5, .5]])
    lattice = np.eye(3) * a
    return {"z": np.array([11] * 4 + [17] * 4), "pos": frac @ lattice, "lattice": lattice, "target": 0.0}


def skewed(seed=0):
    rng = np.random.default_rng(seed)
    lattice = np.array([[4.0, 0, 0], [1.2, 3.7, 0], [0.5, 0.8, 5.1]]) + rng.normal(0, 0.1, (3, 3))
    frac = rng.random((5, 3))
    return {"z": np.array([8, 8, 12, 22, 3]), "pos": frac @ lattice, "lattice": lattice, "target": 0.0}


def slow_attention(att: PeriodicAttention, x, crystal, reach):
    """y_i = Σ_j softmax_j(q_iᵀk_j/√d + α_ij)(v_j + β_ij) with explicit loops over i, j and n."""
    pos, L = torch.as_tensor(crystal["pos"]), torch.as_tensor(crystal["lattice"])
    N, H, dk = len(pos), att.heads, att.dk
    q, k, v = (f(x).view(N, H, dk) for f in (att.q, att.k, att.v))
    inv_s2 = shifted_elu((torch.einsum("ahd,hd->ah", q, att.w) - att.m) / att.s, att.a, att.b) / att.r0**2
    R = 6
    ns = [torch.tensor([a, b, c], dtype=L.dtype) for a in range(-R, R + 1) for b in range(-R, R + 1)
          for c in range(-R, R + 1)]
    y = torch.zeros(N, H, dk, dtype=x.dtype)
    for h in range(H):
        for i in range(N):
            logits, values = [], []
            for j in range(N):
                terms, dists = [], []
                for n in ns:
                    r = torch.linalg.norm(pos[j] + n @ L - pos[i])
                    if r <= reach:
                        terms.append(-r**2 * inv_s2[i, h] / 2)
                        dists.append(r)
                if not terms:
                    continue
                terms = torch.stack(terms)
                alpha = torch.logsumexp(terms, 0)
                w = torch.softmax(terms, 0)
                beta = 0
                if att.mode == "full":
                    psi = rbf(torch.stack(dists), att.n_rbf, att.r_max) @ att.W_E[h]      # (n, dk)
                    beta = (w[:, None] * psi).sum(0)
                logits.append(q[i, h] @ k[j, h] / math.sqrt(dk) + alpha)
                values.append(v[j, h] + beta)
            a = torch.softmax(torch.stack(logits), 0)
            y[i, h] = (a[:, None] * torch.stack(values)).sum(0)
    return att.out(y.reshape(N, H * dk))


@pytest.mark.parametrize("mode", ["full", "simplified"])
def test_image_softmax_equals_alpha_beta_loops(mode):
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=1, heads=2, ffn=16, mode=mode, n_rbf=8).double()
    crystal = skewed()
    batch = collate([crystal], reach=model.reach)
    att = model.blocks[0].attn
    with torch.no_grad():
        att.m.normal_(0, 0.3), att.s.uniform_(0.5, 2.0)
        att.calibrated.fill_(True)
    x = torch.randn(5, 16, dtype=torch.float64)
    fast = att(x, batch["src"], batch["dst"], batch["r2"])
    torch.testing.assert_close(fast, slow_attention(att, x, crystal, model.reach), rtol=1e-9, atol=1e-10)


def _predict(model, crystals):
    with torch.no_grad():
        return model(collate(crystals))


def _rotation(seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    return q


@pytest.mark.parametrize("mode", ["full", "simplified", "cutoff"])
def test_invariances(mode):
    torch.manual_seed(0)
    model = Crystalformer(dim=32, depth=2, heads=4, ffn=64, mode=mode, n_rbf=16).double()
    base = [rock_salt(), skewed(1)]
    model.train()
    model(collate(base))                      # fixes m and s from a first batch, as in training
    model.eval()
    ref = _predict(model, base)
    assert abs(float(ref[0] - ref[1])) > 1e-4, "the two test crystals should get different predictions"
    for c, y in zip(base, ref):
        L = c["lattice"]
        super_cell = {**c, "z": np.concatenate([c["z"]] * 2), "pos": np.concatenate([c["pos"], c["pos"] + L[0]]),
                      "lattice": L * np.array([[2.0], [1.0], [1.0]])}
        R = _rotation(3)
        rotated = {**c, "pos": c["pos"] @ R.T, "lattice": L @ R.T}
        frac = ((c["pos"] + np.array([0.37, -1.2, 2.9])) @ np.linalg.inv(L)) % 1.0   # shifted and wrapped
        shifted = {**c, "pos": frac @ L}
        perm = np.random.default_rng(0).permutation(len(c["z"]))
        permuted = {**c, "z": c["z"][perm], "pos": c["pos"][perm]}
        for name, variant in [("supercell", super_cell), ("rotation", rotated), ("translation", shifted),
                              ("permutation", permuted)]:
            got = _predict(model, [variant])[0]
            assert abs(float(got - y)) < 1e-8 * max(1.0, abs(float(y))), (name, float(got), float(y))


def test_chunked_radial_sum_matches_one_pass():
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=1, heads=2, ffn=16, n_rbf=8).double()
    batch = collate([rock_salt(), skewed(1)], reach=model.reach)
    att = model.blocks[0].attn
    x = torch.randn(13, 16, dtype=torch.float64, requires_grad=True)
    whole = att(x, batch["src"], batch["dst"], batch["r2"])
    g_whole = torch.autograd.grad(whole.sum(), [x, att.W_E])
    att.chunk = 100                                   # forces several checkpointed chunks
    chunked = att(x, batch["src"], batch["dst"], batch["r2"])
    torch.testing.assert_close(chunked, whole)
    for a, b in zip(torch.autograd.grad(chunked.sum(), [x, att.W_E]), g_whole):
        torch.testing.assert_close(a, b)


def test_prediction_does_not_depend_on_batch_mates():
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=1, heads=2, ffn=16).double().train()
    model(collate([rock_salt(), skewed(1)]))      # saves m, s (before that the batch standardises itself)
    model.eval()
    a, b = rock_salt(), skewed(2)
    torch.testing.assert_close(_predict(model, [a, b])[0], _predict(model, [a])[0])


def test_swa_module_gets_the_calibrated_buffers():
    """run() evaluates swa.module, copied before training fixed m, s and the target scale;
    AveragedModel.update_parameters must bring those buffers along."""
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=1, heads=2, ffn=16).double()
    swa = torch.optim.swa_utils.AveragedModel(model)        # copied before calibration, as in run()
    model.y_mean.fill_(-3.0)
    model.train()
    model(collate([rock_salt(), skewed(1)]))               # fixes m, s
    swa.update_parameters(model)
    model.eval()
    torch.testing.assert_close(_predict(swa.module.eval(), [skewed(2)]), _predict(model, [skewed(2)]))


def test_predict_takes_pymatgen_structures():
    from pymatgen.core import Lattice, Structure

    from methods.crystalformer import predict
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=1, heads=2, ffn=16)
    c = rock_salt()
    structure = Structure(Lattice(c["lattice"]), ["Na"] * 4 + ["Cl"] * 4, c["pos"], coords_are_cartesian=True)
    got = predict(model, [structure, c])
    assert got.shape == (2,) and abs(float(got[0] - got[1])) < 1e-5


def test_rbf_is_the_official_basis():
    """Official _get_basis_func (m = r_max, K = n): exp(-((k·m/K − r) / (√2·m/K))²), k = 1..K;
    and real_enc_fwd.cu's recurrence b = −r/μ0/(√2), b += 1/√2 per basis, exp(−b²), μ0 = m/K."""
    r_max, n = 14.0, 64
    r = torch.tensor([0.0, 0.1, 1.7, 3.5, 6.9, 13.9, 14.0, 15.2], dtype=torch.float64)
    got = rbf(r, n, r_max)
    for a, x in enumerate(r.tolist()):
        want = [math.exp(-(((k + 1) * r_max / n - x) / (math.sqrt(2) * r_max / n)) ** 2) for k in range(n)]
        torch.testing.assert_close(got[a], torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-15)
        b, cuda = -x / (r_max / n) / math.sqrt(2), []
        for _ in range(n):
            b += 1 / math.sqrt(2)
            cuda.append(math.exp(-b * b))
        torch.testing.assert_close(got[a], torch.tensor(cuda, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert int(got[6].argmax()) == n - 1 and float(got[0, 0]) < 0.61   # last centre at r_max, none at 0


@pytest.mark.parametrize("heads,dim,n_rbf", [(8, 128, 64), (4, 64, 64)], ids=["paper", "mini"])
def test_W_E_is_xavier_uniform_with_gain_n_rbf_to_the_minus_half(heads, dim, n_rbf):
    """Official: xavier_uniform_(W, gain=K^-½) on the (heads·d_k, K) matrix, so fan_in K, fan_out
    heads·d_k: U(−a, a), a = gain·√(6/(fan_in + fan_out)), std a/√3. For n samples of U(−a, a)
    the sample variance has sd √((a⁴/5 − a⁴/9)/n), i.e. the sample std a relative sd ≈ 0.447/√n;
    we allow 5 of those."""
    torch.manual_seed(0)
    model = Crystalformer(dim=dim, depth=4, heads=heads, ffn=dim, n_rbf=n_rbf)
    W = torch.cat([blk.attn.W_E.detach().flatten() for blk in model.blocks]).double()
    a = n_rbf**-0.5 * math.sqrt(6 / (n_rbf + dim))
    n = W.numel()
    assert float(W.abs().max()) <= a * (1 + 1e-6)            # float32 rounding of the bound
    assert abs(float(W.std()) / (a / math.sqrt(3)) - 1) < 5 * 0.447 / math.sqrt(n)
    assert abs(float(W.mean())) < 5 * (a / math.sqrt(3)) / math.sqrt(n)
    if heads == 8:
        assert abs(a / math.sqrt(3) - 0.01276) < 1e-5          # the README's 0.0128


def test_species_embedding_is_scaled_by_9N_to_the_minus_quarter():
    """Official latticeformer.py: emb_scale = model_dim**-0.5; emb_scale *= (9*num_layers)**(-1/4)
    under T-Fixup. Sample std of n normals has relative sd 1/√(2n); we allow 5 of those."""
    torch.manual_seed(0)
    model_dim, num_layers = 128, 4
    emb_scale = model_dim**(-0.5)
    emb_scale *= (9 * num_layers)**(-1 / 4)
    E = Crystalformer(dim=model_dim, depth=num_layers).embed.weight.detach().double()
    assert abs(emb_scale - 0.0361) < 1e-4
    assert abs(float(E.std()) / emb_scale - 1) < 5 / math.sqrt(2 * E.numel())


def test_m_s_are_one_mean_and_std_over_atoms_and_heads_saved_by_the_first_training_batch():
    """Official gauss_scale: shift = −mean, scale = 1/std of q_iᵀw over the whole (atoms, heads)
    array (torch's unbiased std); before the first training step every batch standardises
    itself (eval too), and the first training batch saves them."""
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=2, heads=4, ffn=32).double()
    batch = collate([rock_salt(), skewed(1)])
    inputs = {}
    for i, blk in enumerate(model.blocks):
        blk.attn.register_forward_hook(lambda mod, args, out, i=i: inputs.__setitem__(i, args[0].detach()))
    with torch.no_grad():
        out_eval = model.eval()(batch)
        assert not any(bool(b.attn.calibrated) for b in model.blocks)       # eval does not save
        out_train = model.train()(batch)
    torch.testing.assert_close(out_eval, out_train, rtol=1e-12, atol=1e-12)  # same batch, same statistics
    for i, blk in enumerate(model.blocks):
        att = blk.attn
        q = att.q(inputs[i]).detach().numpy().reshape(-1, att.heads, att.dk)
        w = att.w.detach().numpy()
        vals = np.array([q[a, h] @ w[h] for a in range(len(q)) for h in range(att.heads)])   # atoms·heads values
        assert att.m.shape == () and att.s.shape == () and bool(att.calibrated)
        assert abs(float(att.m) - vals.mean()) < 1e-12 and abs(float(att.s) - vals.std(ddof=1)) < 1e-12
    m0 = [float(b.attn.m) for b in model.blocks]
    with torch.no_grad():
        model(collate([skewed(2)]))                                         # later batches do not move them
    assert [float(b.attn.m) for b in model.blocks] == m0


def test_parameter_count_matches_paper_scale():
    n = sum(p.numel() for p in Crystalformer().parameters())
    assert 800_000 < n < 900_000      # the paper: about 853K


def test_ewald_set_is_cached_and_charge_balanced(tmp_path):
    from common.data.crystals import charge_assignments, load_ewald
    assert charge_assignments([1, 1]) == [(1, -1), (2, -2), (3, -3), (-1, 1), (-2, 2), (-3, 3)]
    cs = load_ewald(20, seed=5, root=tmp_path)
    assert len(cs) == 20 and (tmp_path / "crystals").exists()
    again = load_ewald(20, seed=5, root=tmp_path)
    assert [c["formula"] for c in cs] == [c["formula"] for c in again]
    assert all(np.isfinite(c["target"]) and c["target"] < 0 for c in cs)   # ionic crystals bind


def test_dcdft_loads():
    pytest.importorskip("ase")
    from common.data.crystals import load_dcdft
    cs = load_dcdft()
    assert len(cs) >= 60 and all(c["target"] > 0 for c in cs)


@pytest.mark.parametrize("crystal", [rock_salt(), skewed(2)], ids=["rock_salt", "skewed"])
def test_truncated_image_sum_matches_14_angstrom_reach_within_derived_bound(crystal):
    """The images kept (r ≤ 3.5 σ_max ≈ 6.9 Å) against the sum over a 14 Å reach. Truncation drops
    softmax mass δ_ih (the full softmax's mass on images beyond the reach, for query i, head h);
    with f = v_j + ψ(r) the kept-and-renormalised average moves by at most 2 δ_ih max‖f‖ (total
    variation), and the output projection by at most its spectral norm times that."""
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=1, heads=2, ffn=16, mode="full", n_rbf=8).double()
    att = model.blocks[0].attn
    with torch.no_grad():
        att.m.zero_(), att.s.fill_(0.5)        # spread σ over [σ_min, σ_max]: some heads near the widest
        att.calibrated.fill_(True)
        att.W_E.normal_(0, 0.3)
    near, far = collate([crystal], reach=model.reach), collate([crystal], reach=14.0)
    x = torch.randn(len(crystal["z"]), 16, dtype=torch.float64)
    with torch.no_grad():
        y_near = att(x, near["src"], near["dst"], near["r2"])
        y_far = att(x, far["src"], far["dst"], far["r2"])
        src, dst, r2 = far["src"], far["dst"], far["r2"]
        A, H, dk = x.shape[0], att.heads, att.dk
        q, k, v = (f(x).view(A, H, dk) for f in (att.q, att.k, att.v))
        score = (q[src] * k[dst]).sum(-1) / math.sqrt(dk) - 0.5 * r2[:, None] * att.inv_sigma2(q)[src]
        p = group_softmax(score, src, A)                                              # (E, H): softmax per query
        dropped = (r2 > model.reach**2).to(p.dtype)
        delta = p.new_zeros(A, H).index_add_(0, src, p * dropped[:, None])             # (A, H)
        f = v[dst] + torch.einsum("er,hrd->ehd", rbf(r2.sqrt(), att.n_rbf, att.r_max), att.W_E)   # (E, H, dk)
        f_max = f.norm(dim=-1).amax(0)                                                # (H,)
        bound = torch.linalg.matrix_norm(att.out.weight, 2) * (2 * delta * f_max).norm(dim=-1)  # (A,)
    assert int(dropped.sum()) > 0 and delta.max() > 0          # the 14 Å reach does add images
    assert delta.max() < 1e-2                                  # and they carry under 1% of any softmax
    err = (y_near - y_far).norm(dim=-1)
    assert torch.all(err <= bound + 1e-12), (err, bound)


@pytest.mark.parametrize("experiment", ["mini", "smoke", "jarvis_formation", "jarvis_total_energy",
                                        "mp_bandgap", "mp_formation"])
def test_every_tier_clips_the_global_gradient_norm_at_1(compose_cfg, experiment):
    """Official params/latticeformer/default.json clip_norm 1.0 (models/regression.py:121)."""
    assert compose_cfg([f"experiment=crystalformer_{experiment}"]).trainer.clip_grad == 1.0


def test_the_calibration_flag_is_read_from_the_buffer_once_and_again_after_a_state_dict_load():
    """The host copy of `calibrated` (no device sync per layer once calibrated) follows the buffer:
    a state_dict without calibration puts a calibrated model back on batch statistics."""
    torch.manual_seed(0)
    model = Crystalformer(dim=16, depth=1, heads=4, ffn=32).double()
    fresh = {k: v.clone() for k, v in model.state_dict().items()}          # uncalibrated
    att = model.blocks[0].attn
    q = torch.randn(7, att.heads, att.dk, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x = torch.einsum("ahd,hd->ah", q, att.w.detach())

    def standardised(m, s):
        return shifted_elu((x - m) / s, att.a, att.b) / att.r0**2

    with torch.no_grad():
        model.train()(collate([rock_salt(), skewed(1)]))
        assert att._calibrated_host and bool(att.calibrated)
        model.eval()
        torch.testing.assert_close(att.inv_sigma2(q), standardised(att.m, att.s))     # the saved m, s
        model.load_state_dict(fresh)
        assert not att._calibrated_host and not bool(att.calibrated)
        torch.testing.assert_close(att.inv_sigma2(q), standardised(x.mean(), x.std()))  # q's own again
