"""Hybrid models: the layers the family templates cannot read (LFM2's short convolutions, its attention
blocks) go to the generic capture and come out as validated problems; nothing is silently dropped."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from solbench.extract import pipeline

LFM2 = {"model_type": "lfm2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "layer_types": ["conv", "full_attention"],
        "vocab_size": 128, "conv_L_cache": 3, "block_auto_adjust_ff_dim": False}


def test_lfm2_conv_and_attention_layers_go_generic(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LFM2))
    result = pipeline.extract_model("tiny/lfm2", path, use_hub=False)
    assert not result.failed, [(v.problem, v.message) for v in result.failed]
    names = {d.name for d in result.drafts}
    assert any(n.startswith("lfm2_short_conv_") for n in names), sorted(names)
    assert any(n.startswith("lfm2_attention_") for n in names), sorted(names)
    assert sum(n.startswith("lfm2_decoder_layer_") for n in names) == 2, sorted(names)  # the conv and attention layers
    assert "embedding_v128_h64" in names  # the templates keep what they read
    assert not any("failed validation" in line or "not captured" in line for line in result.not_emitted), \
        result.not_emitted


class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return torch.tanh(x * self.weight).cumsum(1)


@pytest.mark.parametrize("sizes", [(4, 6), (4, 6, 10)])
def test_validation_uses_the_capture_sizes_with_two_or_three_of_them(sizes):
    """With two sizes the last capture point repeats; the check must compare each recorded call at the size
    it was recorded at (once), never at a workload size."""
    from solbench.extract import blocks
    from solbench.extract.built import BuiltModel

    with torch.device("meta"):
        model = nn.Sequential(_Scale()).eval()
    built = BuiltModel("tiny/scale", model, "module",
                       lambda axes, dtype: ((torch.empty(2, axes["seq_len"], 8, dtype=dtype),), {}),
                       {"seq_len": sizes}, {"seq_len": (128, 1024)})
    found = blocks.extract_blocks(built, torch.float32)
    assert found.drafts and all(v.passed for v in found.validations), [v.message for v in found.validations]
    assert found.drafts[0].workload_points[-1] == {"seq_len": 1024}
    assert (len(sizes) == 2) == ("compared at 1 size" in found.validations[0].message)


JAMBA = {"model_type": "jamba", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "attn_layer_period": 2, "attn_layer_offset": 1,
         "num_experts": 1, "expert_layer_period": 1, "expert_layer_offset": 0, "vocab_size": 128,
         "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 4}


def test_jamba_mamba_layer_goes_generic_and_a_fixed_size_is_said(tmp_path):
    """The slow Mamba path loops over the sequence, so its export fixes seq_len: the problem is compared at
    the traced size (where get_inputs fits the call), and the validation says so."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(JAMBA))
    result = pipeline.extract_model("tiny/jamba", path, use_hub=False)
    assert not result.failed, [(v.problem, v.message) for v in result.failed]
    mixer = next(v for v in result.validations if v.problem.startswith("jamba_mamba_mixer_"))
    assert "traced size only" in mixer.message and mixer.exact == {"float32": True, "bfloat16": True}
    assert any(d.name.startswith("jamba_mamba_decoder_layer_") for d in result.drafts)


def test_a_block_too_large_for_cpu_validation_is_reported(monkeypatch):
    from solbench.extract import blocks
    from solbench.extract.built import BuiltModel

    monkeypatch.setattr(blocks, "MAX_BLOCK_PARAMS", 4)  # the 8-weight block is over it
    with torch.device("meta"):
        model = nn.Sequential(_Scale()).eval()
    built = BuiltModel("tiny/scale", model, "module",
                       lambda axes, dtype: ((torch.empty(2, axes["seq_len"], 8, dtype=dtype),), {}),
                       {"seq_len": (4, 6)}, {"seq_len": (128,)})
    found = blocks.extract_blocks(built, torch.float32)
    assert not found.drafts
    assert any("too large to validate on CPU" in item.reason for item in found.not_emitted), found.not_emitted


class _Cast(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return (x.float() * self.weight).to(torch.bfloat16, copy=True, memory_format=torch.contiguous_format)


def test_a_cast_with_a_memory_format_is_emitted_as_valid_code():
    """aten.to passes memory_format positionally; Tensor.to takes it by keyword only (Qwen3-Next's gated
    delta net failed with a TypeError)."""
    from solbench.extract import blocks
    from solbench.extract.built import BuiltModel

    with torch.device("meta"):
        model = nn.Sequential(_Cast()).eval()
    built = BuiltModel("tiny/cast", model, "module",
                       lambda axes, dtype: ((torch.empty(2, axes["seq_len"], 8, dtype=dtype),), {}),
                       {"seq_len": (4, 6, 10)}, {"seq_len": (128,)})
    found = blocks.extract_blocks(built, torch.float32)
    assert found.drafts and all(v.passed for v in found.validations), [v.message for v in found.validations]
    assert "memory_format=torch.contiguous_format" in found.drafts[0].code, found.drafts[0].code
