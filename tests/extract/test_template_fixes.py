"""Decoder-layer templates on the text models of VL configs and on GLM / MiniMax-M2 / OLMo-3 layouts: small
configs, every drafted problem validated against its transformers module (bit-exact as for the others)."""

from __future__ import annotations

import json

import pytest

from solbench.extract import pipeline

ATTN = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128}
CONFIGS = {
    # partial rotary (half of each head), QK-norm, a dense first layer then sigmoid group routing
    "glm4_moe": dict(ATTN, model_type="glm4_moe", partial_rotary_factor=0.5, n_routed_experts=8, num_experts_per_tok=2,
                     moe_intermediate_size=32, intermediate_size=96, first_k_dense_replace=1, num_hidden_layers=2,
                     n_group=1, topk_group=1, use_qk_norm=True),
    # the router takes its block's selection bias; q/k norms span all heads; partial RoPE as `rotary_dim`
    "minimax_m2": dict(ATTN, model_type="minimax_m2", num_local_experts=8, num_experts_per_tok=2, intermediate_size=32,
                       num_hidden_layers=1, rotary_dim=8),
    # a VL config: the decoder is its text_config, built without a causal-LM head in the auto mapping
    "qwen3_vl": {"model_type": "qwen3_vl",
                 "text_config": dict(ATTN, intermediate_size=96, num_hidden_layers=1,
                                     rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                                      "mrope_section": [2, 3, 3], "mrope_interleaved": True}),
                 "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                   "out_hidden_size": 64}},
}
EXPECTED = {
    "glm4_moe": ("attention_block_prefill_hs64_h4_kv2_d16_qknormeps1e-05_rope8",
                 "decoder_layer_decode_hs64_h4_kv2_d16_qknormeps1e-05_rope8_moe_sigmoid_grouped_e8_k2_i32_shared32"
                 "_eps1e-05"),
    "minimax_m2": ("moe_router_sigmoid_grouped_e8_k2_g1_tg1_h64_renorm_wlogits",
                   "decoder_layer_prefill_hs64_h4_kv2_d16_qknormflat_rope8_moe_sigmoid_grouped_e8_k2_i32_eps1e-06"),
    "qwen3_vl": ("decoder_layer_decode_hs64_h4_kv2_d16_qknorm_swiglu_i96_eps1e-06", "embedding_v128_h64"),
}


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_templates_apply_and_validate(model_type, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[model_type]))
    result = pipeline.extract_model(f"tiny/{model_type}", path, use_hub=False)
    assert not result.failed, [(v.problem, v.message) for v in result.failed]
    inexact = [v.problem for v in result.validations if not v.exact.get("float32")]
    assert all("moe" in n or "_backward" in n for n in inexact), inexact  # within rounding, as documented
    names = {d.name for d in result.drafts}
    assert set(EXPECTED[model_type]) <= names, sorted(names)
    if model_type != "qwen3_vl":
        assert not result.skipped
        return
    # multi-axis RoPE: the template declines it, says so, and the generic capture emits it instead
    declined = [line for line in result.skipped if not line.startswith(("not emitted:", "workloads:"))]
    assert len(declined) == 1 and "rotary table" in declined[0], result.skipped
    assert any(name.startswith("qwen3vl_text_rotary_embedding_") for name in names), sorted(names)
    # a text-only forward never calls the vision tower (docs/extract.md): reported, module by module
    gaps = [line for line in result.skipped if line.startswith("not emitted:")]
    assert gaps and all("visual." in line and "not called" in line for line in gaps), gaps


def test_an_attention_whose_query_projection_also_gives_a_gate_is_left_to_the_generic_capture():
    """Qwen3-Next's q_proj gives the queries and a gate per head (twice o_proj's input): read as queries alone,
    the templates wrote its attention at twice its heads (h32 for 16), and the core problems validated, since
    the core is compared at the shapes the template declares. The templates now decline it."""
    from solbench.extract import build
    from solbench.extract.families import attention
    from solbench.spec.errors import SpecError
    from tests.extract.test_workload_shapes import QWEN3_NEXT

    built = build.build_transformers("tiny/qwen3-next", dict(QWEN3_NEXT))
    module = next(m for m in built.module.modules() if type(m).__name__ == "Qwen3NextAttention")
    assert module.q_proj.out_features == 2 * module.o_proj.in_features
    with pytest.raises(SpecError, match="output gate"):
        attention.attention_info(module, built.module.config, "full_attention")


def test_an_attention_with_parameters_the_templates_do_not_read_is_declined():
    """Parakeet's relative-position attention has q/k/v/o projections like any other, plus a projection of the
    position table and two biases (u, v) added to the queries: templated, it failed validation and was
    dropped; declined, the generic capture emits it."""
    pytest.importorskip("transformers.models.parakeet")
    from solbench.extract import build
    from solbench.extract.families import attention
    from solbench.spec.errors import SpecError
    from tests.extract.test_generic_blocks import PARAKEET

    built = build.build_transformers("tiny/parakeet-encoder", dict(PARAKEET["encoder_config"]))
    module = next(m for m in built.module.modules() if type(m).__name__ == "ParakeetEncoderAttention")
    with pytest.raises(SpecError, match="bias_u, bias_v, relative_k_proj"):
        attention.attention_info(module, built.module.config, None)


ERNIE = dict(ATTN, model_type="ernie4_5_moe", num_hidden_layers=1, intermediate_size=96, moe_num_experts=4,
             moe_k=2, moe_intermediate_size=32, moe_layer_start_index=1)


def test_a_rope_of_the_right_width_but_another_formula_is_declined():
    """ERNIE 4.5's rotary helper takes full-width cos/sin, as rotate-half does, but rotates interleaved pairs
    (GLM's layout) in float32, and its rotary module keeps the table in float32. The templates read the width
    only: the attention, the fused layers and the table were drafted, failed validation and were dropped. Now
    the templates decline them (the generic capture emits ERNIE's attention and table); a Llama attention,
    whose helper is the formula the templates write, is still taken."""
    from solbench.extract import build
    from solbench.extract.families import attention, rotary
    from solbench.spec.errors import SpecError

    built = build.build_transformers("tiny/ernie4_5_moe", dict(ERNIE))
    module = next(m for m in built.module.modules() if type(m).__name__ == "Ernie4_5_MoeAttention")
    with pytest.raises(SpecError, match="not the rotate-half formula"):
        attention.attention_info(module, built.module.config, None)
    with pytest.raises(SpecError, match="float32 table"):
        rotary.rotary_table_draft(*rotary.rotary_module(built.module))
    llama = build.build_transformers("tiny/llama", dict(ATTN, model_type="llama", num_hidden_layers=1,
                                                        intermediate_size=96))
    module = next(m for m in llama.module.modules() if type(m).__name__ == "LlamaAttention")
    assert attention.attention_info(module, llama.module.config, None).rope == "full"
    assert rotary.rotary_table_draft(*rotary.rotary_module(llama.module)).op_type == "rope_table"
