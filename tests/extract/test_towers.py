"""With `encoders`, the encoders a token-id call never reaches (a VL model's vision tower, a speech LM's
audio encoder) are called with their own inputs and extracted; an encoder whose call reads sizes from its inputs' values
(Qwen3-VL's `grid_thw`) stays reported as never called (small configs, CPU)."""

from __future__ import annotations

import json

import pytest

from solbench.extract import build, pipeline, towers

TEXT = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 96, "vocab_size": 128}
CONFIGS = {
    "gemma3": {"model_type": "gemma3", "text_config": dict(TEXT, model_type="gemma3_text"), "mm_tokens_per_image": 4,
               "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "image_size": 28, "patch_size": 14, "vision_use_head": False}},
    "voxtral": {"model_type": "voxtral", "text_config": dict(TEXT, model_type="llama"),
                "audio_config": {"num_mel_bins": 16, "max_source_positions": 8, "hidden_size": 32, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "intermediate_size": 64}},
}
# encoder path in the model, an emitted block of it, its first input
EXPECTED = {"gemma3": ("model.vision_tower", "siglip_encoder_layer", "pixel_values"),
            "voxtral": ("audio_tower", "voxtral_encoder_layer", "input_features")}


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_encoders_are_called_with_their_own_inputs(model_type):
    built = build.build_transformers(f"tiny/{model_type}", dict(CONFIGS[model_type]))
    found = towers.encoders(built)
    root, _, first = EXPECTED[model_type]
    assert [e.root for e in found] == [root]
    point = {axis: sizes[0] for axis, sizes in found[0].capture_axes.items()}
    _, kwargs = found[0].make_call(point, built.module.dtype)
    assert list(kwargs) == [first] and kwargs[first].shape[0] == found[0].capture_axes["batch_size"][0]


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_encoder_blocks_are_extracted_validated_and_named_by_their_model_path(model_type, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[model_type]))
    result = pipeline.extract_model(f"tiny/{model_type}-towers", path, use_hub=False, encoders=True)
    root, block, _ = EXPECTED[model_type]
    assert not result.failed, [(v.problem, v.message) for v in result.failed]
    layer = next((d for d in result.drafts if d.op_type == block), None)
    assert layer is not None, sorted(d.name for d in result.drafts)
    assert next(v for v in result.validations if v.problem == layer.name).exact == {"float32": True, "bfloat16": True}
    assert layer.hints["module_paths"] == [f"{root}.{'encoder.' if model_type == 'gemma3' else ''}layers.0",
                                           f"{root}.{'encoder.' if model_type == 'gemma3' else ''}layers.1"]
    assert not [line for line in result.skipped if "not called" in line], result.skipped
    plain = pipeline.extract_model(f"tiny/{model_type}-towers", path, use_hub=False)  # off by default: costly
    assert not [d for d in plain.drafts if d.op_type == block]


def test_an_encoder_that_reads_sizes_from_data_is_still_reported_never_called():
    from tests.extract.test_template_fixes import CONFIGS as VL

    built = build.build_transformers("tiny/qwen3_vl", dict(VL["qwen3_vl"]))
    assert towers.encoders(built) == []  # its vision tower takes `grid_thw` values: no recipe
