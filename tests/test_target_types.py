"""Method and eval values typed by the signatures their `_target_` blocks name (common/target_types.py)."""
import os
import subprocess
import sys

import pytest

from common.config import UserError, compose_checked
from common.target_types import _definition, _kinds, _ok, _params, check_block, check_kernels, check_targets
from tests.conftest import ROOT


@pytest.mark.parametrize("annotation, default, value, ok", [
    ("int", 3, 4, True), ("int", 3, 4.5, False), ("int", 3, "abc", False), ("int", 3, True, False),
    ("float", 0.1, 1, True), ("float", 0.1, "x", False), ("float | None", None, None, True),
    ("float", 0.1, None, False), ("Optional[int]", None, None, True), ("bool", True, 1, False),
    ("str", "a", "b", True), ("tuple[int, ...]", (1,), [1, 2], True), ("tuple[int, ...] | None", None, 3, False),
    ('Literal["learned", "none", "random"]', "learned", "none", True),
    ('Literal["learned", "none", "random"]', "learned", "bogus", False),
    (None, 0.5, "abc", False), (None, 0.5, 2, True), (None, None, "anything", True),
])
def test_kinds_from_annotations_and_defaults(annotation, default, value, ok):
    kinds = _kinds(annotation, default)
    assert kinds is not None if annotation or default is not None else kinds is None
    if kinds is not None:
        assert _ok(value, *kinds) == ok


def test_signatures_are_read_without_importing_and_follow_reexports_and_bases():

    mcm = dict(_params(_definition("methods.mcm.MCMDetector")))
    assert mcm["num_masks"] == ("int", 15) and mcm["hidden_dim"][0] == "int"
    simclr = dict(_params(_definition("methods.simclr.SimCLR")))          # through its base class
    assert simclr["temperature"] == ("float", 0.5)
    assert _definition("torch.optim.AdamW") is None                        # a library's: its own checks


def test_a_wrong_type_names_the_key_the_value_and_the_signature():
    with pytest.raises(UserError, match=r"method.model.hidden_dim must be an integer, got 'abc'.*MCMDetector") as err:
        check_block({"_target_": "methods.mcm.MCMDetector", "hidden_dim": "abc"}, "method.model.")
    assert err.value.exit_code == 2
    check_block({"_target_": "methods.mcm.MCMDetector", "hidden_dim": 64, "lambda_div": 1}, "method.model.")


def test_kernels_triton_on_the_cpu_is_refused_unless_interpreting(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(UserError, match="needs a CUDA device") as err:
        check_kernels({"kernels": "triton", "device": "cpu"})
    assert err.value.exit_code == 2
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check_kernels({"kernels": "triton", "device": "cpu"})
    check_kernels({"kernels": "reference", "device": "cpu"})


def test_every_default_method_config_passes():
    for method in ("mcm", "simclr", "crystalformer", "besa", "intra_fusion"):
        check_targets(compose_checked([f"method={method}"]))


@pytest.mark.parametrize("args, message", [
    (["experiment=mcm_smoke", "method.model.hidden_dim=abc"], "method.model.hidden_dim must be an integer"),
    (["experiment=mcm_smoke", "method.model.masking=bogus"], "method.model.masking must be one of learned, none, random"),
    (["experiment=simclr_smoke", "method.backbone.width=-4"], "method.backbone.width must be >= 1"),
    (["experiment=crystalformer_smoke", "hardware.kernels=triton"], "hardware.kernels=triton needs a CUDA device"),
])
def test_bad_method_values_exit_2_before_anything_loads(args, message):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "scripts/train.py", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) <= 3
