"""The methods wired to common/kernels run their smoke experiments with hardware.kernels=triton
(Triton's CPU interpreter here, CUDA on a GPU machine) and report what the reference path
reports, within float tolerance: the switch a GPU user flips is the code CI ran."""
from __future__ import annotations

import pytest

# Crystalformer: periodic attention; LightHGNN: segment sum; Soft MoE: the fused layer; VCAS:
# SampleW's ∇W (4 steps: the controller lowers ν at step 2, so steps 3-4 sample). Smaller than the
# smokes, because the interpreter runs each Triton program in numpy (the full smokes take minutes under it).
WIRED = {"crystalformer_smoke": ["dataset.size=12", "dataset.val=2", "dataset.test=2", "trainer.max_steps=2",
                                 "trainer.batch_size=4", "trainer.eval_every=1"],
         "lighthgnn_smoke": ["dataset.num_vertices=120", "trainer.max_steps=2"],
         "soft_moe_smoke": ["dataset.train_size=64", "dataset.test_size=32", "trainer.max_steps=2",
                            "trainer.batch_size=16", "method.stats_images=8"],
         "vcas_smoke": ["dataset.train_size=96", "dataset.eval_train_size=16", "dataset.test_size=32",
                        "trainer.batch_size=16"]}


@pytest.mark.parametrize("experiment", sorted(WIRED))
def test_smoke_with_triton_kernels_reports_the_reference_numbers(experiment, compose_cfg, tmp_path):
    pytest.importorskip("triton")
    from common.kernels import interpreting
    from common.runner import run_method

    if not interpreting():
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest.py without CUDA)")
    out = {}
    for impl in ("reference", "triton"):
        cfg = compose_cfg([f"experiment={experiment}", f"hardware.kernels={impl}", f"run_dir={tmp_path / impl}",
                          *WIRED[experiment]])
        out[impl] = run_method(cfg)
    assert out["triton"].keys() == out["reference"].keys()
    for key, ref in out["reference"].items():
        assert out["triton"][key] == pytest.approx(ref, rel=2e-3, abs=2e-4), key
