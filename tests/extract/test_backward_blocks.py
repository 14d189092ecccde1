"""Backward references of generic blocks on a small Llama (CPU): traced from the joint graph, validated
against the module's autograd (fp32 within 1e-6 of scale, bf16 bit-exact), written, run with `solbench run`
(reference as solution) and priced by `solbench sol` with no operator left unpriced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solbench.extract import backward, backward_check, blocks, build, emit
from solbench.extract.configs import ModelConfig
from solbench.extract.generic import Block
from tests.child_env import repo_env

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--device", "cpu", "--trials", "1", "--iters", "2", "--warmup", "1", "--no-adaptive"]
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 128}
KEEP = ("LlamaMLP", "LlamaRMSNorm", "LlamaRotaryEmbedding")


@pytest.fixture(scope="module")
def llama():
    built = build.build_transformers("test/llama-backward", LLAMA)
    kept = {p for p, m in built.module.named_modules() if type(m).__name__ in KEEP}
    result = blocks.extract_blocks(built, torch.bfloat16, backward=True,
                                   covered=lambda path: "" if path in kept else "not wanted in this test")
    return built, result


def _backward(result, op_type: str):
    return next(d for d in result.drafts if d.op_type == f"{op_type}_backward")


def test_kinds_follow_the_module_class():
    kinds = {name: backward.kind_of(Block("", name, None, [])) for name in
             ("LlamaMLP", "Qwen2RMSNorm", "Qwen3MoeSparseMoeBlock", "Mamba2Mixer", "WhisperAttention",
              "LlamaRotaryEmbedding", "LlamaDecoderLayer", "ResnetBlock2D", "Timesteps", "ConvNextV2Layer",
              "ConvNextV2LayerNorm", "Qwen3MoeAttention", "Glm4MoeTopkRouter", "Qwen3MoeExperts")}
    assert kinds == {"LlamaMLP": "mlp", "Qwen2RMSNorm": "norm", "Qwen3MoeSparseMoeBlock": "moe",
                     "Mamba2Mixer": "ssm", "WhisperAttention": "attention", "LlamaRotaryEmbedding": "rotary",
                     "LlamaDecoderLayer": "layer", "ResnetBlock2D": "", "Timesteps": "", "ConvNextV2Layer": "layer",
                     "ConvNextV2LayerNorm": "norm", "Qwen3MoeAttention": "attention", "Glm4MoeTopkRouter": "router",
                     "Qwen3MoeExperts": "moe"}


def test_backward_problems_take_output_gradients_and_return_input_and_weight_gradients(llama):
    _, result = llama
    mlp = _backward(result, "llama_mlp")
    assert [a.name for a in mlp.inputs] == ["grad_output", "x", "gate_proj_weight", "up_proj_weight",
                                            "down_proj_weight"]
    assert [a.name for a in mlp.outputs] == ["grad_x", "grad_gate_proj_weight", "grad_up_proj_weight",
                                             "grad_down_proj_weight"]
    assert mlp.axes["seq_len"][0] == "var" and mlp.outputs[1].shape == mlp.inputs[2].shape
    norm = _backward(result, "llama_rms_norm")
    assert [a.name for a in norm.outputs] == ["grad_hidden_states", "grad_weight"]
    rotary = _backward(result, "llama_rotary_embedding")  # position ids carry no gradient; inv_freq does
    assert [a.name for a in rotary.outputs] == ["grad_inv_freq"]
    for draft in (mlp, norm, rotary):
        assert "meta" not in draft.code and "_assert" not in draft.code


def test_backward_matches_autograd_at_two_other_sizes(llama):
    _, result = llama
    checks = {v.problem: v for v in result.validations if "_backward_" in v.problem}
    # the MLP, norm and rotary kept, and the attention and layer that the fixture's `covered` claims: a
    # covered block of those kinds is still captured for its backward (blocks.BACKWARD_PAST_TEMPLATES)
    kinds = sorted(name.rsplit("_", 1)[0] for name in checks)
    assert kinds == ["llama_attention_backward", "llama_decoder_layer_backward", "llama_mlp_backward",
                     "llama_rms_norm_backward", "llama_rotary_embedding_backward"], kinds
    assert all(v.passed for v in checks.values()), [v.message for v in checks.values()]
    for check in checks.values():
        assert "compared at" not in check.message  # two capture sizes besides the traced one
        assert check.max_abs_error["float32"] <= backward_check.FP32_LIMIT
        assert check.exact["bfloat16"], check


def test_a_wrong_backward_fails_validation(llama):
    """The check can fail: the MLP's backward with one gradient scaled by 1 + 2^-7 is rejected."""
    built, result = llama
    mlp = _backward(result, "llama_mlp")
    forward = next(d for d in result.drafts if d.name == mlp.hints["backward_of"])
    kept = {p for p, m in built.module.named_modules() if type(m).__name__ == "LlamaMLP"}
    block = next(b for b in _blocks(built) if b.path in kept)
    gen, how = _gen_and_plan(built, block, forward)
    traced = backward.backward_draft(forward, block, gen, how, torch.bfloat16)
    head, _, tail = traced.draft.code.rpartition("return ")
    traced.draft.code = head + "return " + tail.replace(",", " * 1.0078125,", 1)
    check = backward_check.check(traced, forward, block, gen)
    assert not check.passed and "float32: gradients off" in check.message


def _blocks(built):
    from solbench.extract import capture, partition

    points = capture.axis_points(built)
    calls = [capture.record_calls(built, p, torch.bfloat16) for p in points]
    return partition.blocks(built.module, calls)[0]


def _gen_and_plan(built, block, forward):
    from solbench.extract import block_export, capture, codegen

    dynamic = capture.varying_dims(block.calls[:2])
    ep = block_export.export_block(block.module, block.calls[0], dynamic)
    gen = codegen.generate(ep, torch.bfloat16, capture.input_names(block.module, block.calls[0]))
    flags = backward.grad_flags(built, capture.axis_points(built)[0], torch.bfloat16)
    return gen, backward.plan(block, forward, gen, flags.get(block.path))


def test_backward_problems_pass_solbench_run_and_are_priced(llama, tmp_path):
    _, result = llama
    chosen = [d for d in result.drafts if d.op_type.endswith("_backward")]
    config = ModelConfig("test/llama-backward", LLAMA, "test")
    emit.write(emit.merge([(config, chosen)]), tmp_path / "problems", tmp_path / "references")
    env = repo_env(ROOT)
    run = subprocess.run([sys.executable, "-m", "solbench", "run", str(tmp_path / "problems"), "--max-workloads",
                          "2", *FAST, "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    traces = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    statuses = [t.get("evaluation", {}).get("status", t.get("status")) for t in traces]
    assert len(statuses) == 10 and set(statuses) == {"PASSED"}, run.stdout[-2000:]
    sol = subprocess.run([sys.executable, "-m", "solbench", "sol", str(tmp_path / "problems"), "--max-workloads",
                          "2", "--no-cache", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert sol.returncode == 0, sol.stderr[-2000:]
    records = [json.loads(line) for line in sol.stdout.splitlines() if line.startswith("{")]
    assert len(records) == 10 and all(not r["unknown_ops"] and r["method"] == "meta" for r in records)
    assert all(r["strict"]["flops_other"] > 0 for r in records)


QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 32,
             "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 128}


@pytest.mark.gpu
def test_backward_references_run_on_the_gpu(tmp_path):
    """Traced on CPU fake tensors, the backwards hold no CPU-only operator: attention (math SDPA), a decoder
    layer, norms and a MoE block (grouped matmuls, histc) run with `solbench run --device cuda`, their own
    reference as the solution, at the model's real sizes too."""
    built = build.build_transformers("test/qwen3-moe-backward", QWEN3_MOE)
    keep = ("Qwen3MoeAttention", "Qwen3MoeSparseMoeBlock", "Qwen3MoeRMSNorm", "Qwen3MoeDecoderLayer")
    kept = {p for p, m in built.module.named_modules() if type(m).__name__ in keep}
    result = blocks.extract_blocks(built, torch.bfloat16, backward=True,
                                   covered=lambda path: "" if path in kept else "not wanted in this test")
    chosen = [d for d in result.drafts if d.op_type.endswith("_backward")]
    assert len(chosen) >= 4, result.not_emitted
    emit.write(emit.merge([(ModelConfig("test/qwen3-moe-backward", QWEN3_MOE, "test"), chosen)]),
               tmp_path / "problems", tmp_path / "references")
    run = subprocess.run([sys.executable, "-m", "solbench", "run", str(tmp_path / "problems"), "--max-workloads",
                          "4", "--device", "cuda", "--json"], capture_output=True, text=True, env=repo_env(ROOT),
                         timeout=1200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    traces = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    statuses = [t.get("evaluation", {}).get("status", t.get("status")) for t in traces]
    expected = sum(min(4, len(d.workload_points)) for d in chosen)  # a router's has its two capture sizes only
    assert len(statuses) == expected and set(statuses) == {"PASSED"}, run.stdout[-3000:]
