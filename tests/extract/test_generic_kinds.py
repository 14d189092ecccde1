"""The generic capture on one block kind per family the templates do not know (small configs, CPU):
an SSM mixer and a vision encoder layer, each exported, emitted and validated bit for bit in fp32 and bf16."""

from __future__ import annotations

import torch

from solbench.extract import blocks, build

MAMBA2 = {"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 1, "num_heads": 4, "head_dim": 32,
          "state_size": 16, "n_groups": 1, "chunk_size": 8, "vocab_size": 64, "expand": 2}
SIGLIP = {"model_type": "siglip_vision_model", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 128, "image_size": 32, "patch_size": 8}



def _extract(facts: dict, keep: tuple[str, ...]):
    built = build.build_transformers("test/" + facts["model_type"], facts)
    kept = {p for p, m in built.module.named_modules() if type(m).__name__ in keep}
    return blocks.extract_blocks(built, torch.bfloat16,
                                 covered=lambda path: "" if path in kept else "not wanted in this test")


def test_mamba2_mixer_is_captured_with_a_variable_sequence():
    result = _extract(MAMBA2, ("Mamba2Mixer",))
    (draft,) = result.drafts
    assert draft.op_type == "mamba2_mixer"
    assert {v.exact["float32"] and v.exact["bfloat16"] for v in result.validations} == {True}
    assert draft.axes["seq_len"][0] == "var" and draft.axes["batch_size"][0] == "var"
    assert "torch.ops.aten" not in draft.code and "meta" not in draft.code
    assert any(n.reason == "not wanted in this test" for n in result.not_emitted)


def test_siglip_vision_layer_is_captured_once_for_both_layers():
    result = _extract(SIGLIP, ("SiglipEncoderLayer",))
    (draft,) = result.drafts
    assert draft.hints["module_paths"] == ["encoder.layers.0", "encoder.layers.1"]
    assert result.validations[0].passed and result.validations[0].exact == {"float32": True, "bfloat16": True}
    assert "F.scaled_dot_product_attention" in draft.code


QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 32,
             "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 128}


def test_moe_block_is_captured_on_its_cpu_path():
    """Traced on meta, the experts take their GPU branch (histc on integers); the emitted code counts in
    float as the CPU branch does, and matches the module bit for bit."""
    result = _extract(QWEN3_MOE, ("Qwen3MoeSparseMoeBlock",))
    (draft,) = result.drafts
    assert "torch.histc(" in draft.code and ".float()" in draft.code
    assert result.validations[0].exact == {"float32": True, "bfloat16": True}
