"""With `backward`, a templated model's attention and decoder layers are also captured generically, for their
backward only: the templates' attention backward starts after the projections, the q/k norms and RoPE, and
they have none of a whole layer, where the official dataset's backward problems start at the module (CPU)."""

from __future__ import annotations

import json

import pytest

from solbench.extract import pipeline

QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": 128}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3") / "config.json"
    path.write_text(json.dumps(QWEN3))
    return pipeline.extract_model("tiny/qwen3-backward", path, use_hub=False, backward=True)


def _generic(draft) -> bool:
    """A generic capture's problem: named `<module class>_<10 hex digits>`; the templates' are not."""
    stem, _, digest = draft.name.rpartition("_")
    return len(digest) == 10 and all(c in "0123456789abcdef" for c in digest) and bool(stem)


def test_only_the_backward_of_covered_attention_and_layers_is_added(extracted):
    generic = sorted(d.op_type for d in extracted.drafts if _generic(d))
    assert generic == ["qwen3_attention_backward", "qwen3_decoder_layer_backward"], generic
    templates = {d.op_type for d in extracted.drafts if not _generic(d)}
    assert {"attention_block", "decoder_layer", "attention_backward"} <= templates, templates  # still theirs
    assert not extracted.failed, [(v.problem, v.message) for v in extracted.failed]


def test_the_attention_backward_starts_at_the_module(extracted):
    with_backward = extracted
    attention = next(d for d in with_backward.drafts if d.op_type == "qwen3_attention_backward")
    names = [a.name for a in attention.inputs]
    assert names[0] == "grad_output" and "hidden_states" in names and "q_proj_weight" in names
    assert {"q_norm_weight", "k_norm_weight"} <= set(names)  # the q/k norms are inside
    assert "grad_hidden_states" in [a.name for a in attention.outputs]
    assert "torch.cat" in attention.code and "torch.neg" in attention.code  # RoPE's rotate_half is inside
    # a traced `view` is written `reshape`: legal on the bf16 trace's copies, it failed on a strided float32
    # tensor (Gemma 3's attention backward)
    assert ".view(" not in attention.code and ".reshape(" in attention.code
    assert "not written" in attention.hints["backward_of"]


def test_the_layer_backward_validated_against_autograd(extracted):
    with_backward = extracted
    layer = next(d for d in with_backward.drafts if d.op_type == "qwen3_decoder_layer_backward")
    check = next(v for v in with_backward.validations if v.problem == layer.name)
    assert check.passed and check.exact.get("bfloat16"), check.message
    assert check.max_abs_error["float32"] <= 1e-6


def test_the_covered_forwards_are_reported_as_captured_for_their_backward(extracted):
    with_backward = extracted
    lines = [line for line in with_backward.left_out if line.startswith(("Qwen3Attention", "Qwen3DecoderLayer"))]
    assert len(lines) == 2 and all("captured only for its backward" in line for line in lines), lines


def test_a_vl_models_text_layers_export_without_a_kv_cache(tmp_path):
    """Qwen3-VL keeps `use_cache` in its text config: the call must still turn the cache off, or the
    attention writes into a DynamicCache and export fails ("a fake tensor in the constant's list")."""
    from tests.extract.test_template_fixes import CONFIGS

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["qwen3_vl"]))
    result = pipeline.extract_model("tiny/qwen3_vl-backward", path, use_hub=False, backward=True)
    kinds = sorted(d.op_type for d in result.drafts if d.op_type.startswith("qwen3vl_text_") and "backward" in d.op_type)
    assert kinds == ["qwen3vl_text_attention_backward", "qwen3vl_text_decoder_layer_backward",
                     "qwen3vl_text_rotary_embedding_backward"], [s for s in result.skipped if "backward" in s]


def test_a_backward_two_blocks_share_is_written_once_with_both_paths():
    """Gemma 3's sliding and full attention differ only in their mask (an input): one backward, both paths; the
    forward's hints (whose path list the backward's copied) are left alone."""
    from solbench.extract.blocks import BlocksResult, _add_backward
    from solbench.extract.draft import Draft

    def draft(paths):
        return Draft("attn_backward_0123456789", "attn_backward", "", {}, [], [], "def run():\n    pass\n", "",
                     hints={"module_paths": paths})

    forward_paths = ["model.layers.0.self_attn"]
    result = BlocksResult()
    _add_backward(result, draft(forward_paths))
    _add_backward(result, draft(["model.layers.5.self_attn"]))
    assert len(result.drafts) == 1
    assert result.drafts[0].hints["module_paths"] == ["model.layers.0.self_attn", "model.layers.5.self_attn"]
    assert forward_paths == ["model.layers.0.self_attn"]
