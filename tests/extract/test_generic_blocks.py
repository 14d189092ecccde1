"""Generic capture end to end on small configs: every block is exported, emitted as code, validated bit for
bit against its module on CPU, and nothing is left out without a reason."""

from __future__ import annotations

import json

import pytest

from solbench.extract.pipeline import extract_model

WHISPER = {"model_type": "whisper", "d_model": 64, "encoder_layers": 1, "decoder_layers": 1,
           "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
           "decoder_ffn_dim": 128, "num_mel_bins": 16, "max_source_positions": 16,
           "max_target_positions": 64, "vocab_size": 51866}


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper") / "config.json"
    path.write_text(json.dumps(WHISPER))
    return extract_model("test/whisper-tiny-config", path, use_hub=False)


def test_whisper_blocks_are_extracted_and_validated(whisper):
    names = {d.name.rsplit("_", 1)[0] for d in whisper.drafts}
    assert {"whisper_encoder_layer", "whisper_decoder_layer", "whisper_attention", "layer_norm"} <= names
    assert whisper.validations and all(v.passed for v in whisper.validations)
    assert all(v.exact == {"float32": True, "bfloat16": True} for v in whisper.validations)
    assert any("a torch.nn primitive" in line for line in whisper.not_emitted)


def test_generic_reference_is_clean_and_has_dynamic_axes(whisper):
    layer = next(d for d in whisper.drafts if d.name.startswith("whisper_decoder_layer"))
    code = layer.reference()
    for leak in ("meta", "_assert_tensor_metadata", "torch.ops.aten"):
        assert leak not in code
    assert layer.axes["batch_size"][0] == "var" and layer.axes["seq_len"][0] == "var"
    assert len(layer.workload_points) > 3 and layer.workload_points[0] != layer.workload_points[1]
