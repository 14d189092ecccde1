"""Hybrid models: the layers the family templates cannot read (LFM2's short convolutions, its attention
blocks) go to the generic capture and come out as validated problems; nothing is silently dropped."""

from __future__ import annotations

import json

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
