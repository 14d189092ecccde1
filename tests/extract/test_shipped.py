"""The shipped problem_defs/hf: loadable, one source of truth for references, CPU-runnable samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from solbench.spec.problem import discover_problems, load_problem

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problem_defs" / "hf"
REFERENCES = ROOT / "reference_impls" / "hf"
FOLDERS = discover_problems(PROBLEMS) if PROBLEMS.is_dir() else []
# A spread of kinds and families, small enough to run their first workload on CPU in seconds.
SAMPLE = ["rmsnorm_h4096_eps1e-06", "gqa_attention_decode_h32_kv8_d128", "mqa_attention_prefill_h4_kv1_d256_sw512",
          "gqa_attention_decode_h64_kv8_d64_sw128_sinks", "moe_router_sigmoid_grouped_e256_k8_g8_tg4_h7168_renorm_scale2p5",
          "moe_experts_swiglu_e128_k8_h2048_i768", "attention_block_prefill_hs1024_h16_kv8_d128_qknorm",
          "patch_embedding_img224_p16_c3_h768", "rmsnorm_backward_h2048_eps1e-05",
          "decoder_layer_decode_hs1024_h16_kv8_d128_qknorm_swiglu_i3072_eps1e-06",
          "decoder_layer_decode_mla_hs2048_h16_qfull_kvr512_nope128_rope64_v128_ropecomplex_scale0p114721_swiglu_i10944"
          "_eps1e-06"]


def test_enough_problems_and_models_are_shipped():
    assert len(FOLDERS) >= 150
    models = set()
    for folder in FOLDERS:
        meta = json.loads((folder / "definition.json").read_text())["solbench"]
        models |= {m["hf_id"] for m in meta["models"]}
    assert len(models) >= 20
    kinds = {json.loads((f / "definition.json").read_text())["op_type"] for f in FOLDERS}
    assert {"norm", "attention", "attention_block", "mlp", "moe_router", "moe_experts", "decoder_layer",
            "encoder_layer", "embedding", "lm_head", "norm_backward", "mlp_backward", "attention_backward"} <= kinds


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_reference_file_is_the_definition_reference(folder):
    problem = load_problem(folder)
    assert problem.name == folder.name
    reference = REFERENCES / f"{folder.name}.py"
    assert reference.is_file(), f"{reference} is missing"
    assert reference.read_text() == problem.definition.reference
    meta = problem.definition.extra["solbench"]
    generic = "hints" in meta  # a generic capture's workloads: its two validated sizes + the model's real ones
    assert (4 if generic else 8) <= len(problem.workloads) <= 16
    assert {"solbench_version", "transformers_version", "models"} <= set(meta)
    assert problem.definition.hf_id == meta["models"][0]["hf_id"]


def test_no_orphan_reference_files():
    names = {f.name for f in FOLDERS}
    orphans = [p.name for p in REFERENCES.glob("*.py") if p.name.removesuffix(".baseline.py").removesuffix(".py")
               not in names]
    assert not orphans


@pytest.mark.parametrize("name", SAMPLE)
def test_sample_runs_on_cpu(name):
    problem = load_problem(PROBLEMS / name)
    namespace: dict = {}
    exec(problem.definition.reference, namespace)
    workload = problem.workloads[0]
    axes = problem.definition.resolve_axes(workload.axes)
    torch.manual_seed(0)
    inputs = namespace[problem.definition.custom_inputs_entrypoint](axes, torch.device("cpu"))
    outputs = namespace["run"](*[inputs[n] for n in problem.definition.inputs])
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    shapes = problem.definition.output_shapes(axes)
    for (out_name, spec), value in zip(problem.definition.outputs.items(), outputs):
        assert tuple(value.shape) == shapes[out_name]
        assert str(value.dtype) == f"torch.{spec.dtype}"
        if value.is_floating_point():
            assert torch.isfinite(value.float()).all()
