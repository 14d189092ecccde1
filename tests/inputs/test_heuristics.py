import math

import pytest
import torch

from solbench.inputs import heuristics
from solbench.inputs.draw import choose, generate
from solbench.inputs.heuristics import HEURISTICS, InputContext
from solbench.inputs.seeds import make_generator


def ctx(name, shape, dtype="float32", description="", op_type=None, seed=0, device="cpu"):
    return InputContext(name=name, dtype_name=dtype, shape=tuple(shape), device=torch.device(device),
                        generator=make_generator(seed, device),
                        shared_generator=lambda key: make_generator(hash(key) % 2**31 + seed, device),
                        description=description, op_type=op_type)


def chosen(name, shape, dtype="float32", description="", op_type=None):
    h = choose(ctx(name, shape, dtype, description, op_type))
    return h.name if h else None


def test_heuristic_names_are_unique_and_documented():
    names = [h.name for h in HEURISTICS]
    assert len(names) == len(set(names))
    for name in names:
        assert f"`{name}`" in heuristics.__doc__


@pytest.mark.parametrize("name,shape,desc", [
    ("input_layernorm_weight", (64,), ""), ("q_norm_weight", (16,), ""), ("norm1_weight", (8,), ""),
    ("weight", (4096,), ""), ("gamma", (32,), ""), ("ln_f_weight", (8,), ""), ("post_attention_layernorm_weight", (8,), ""),
])
def test_norm_weight_detected(name, shape, desc):
    assert chosen(name, shape, description=desc) == "norm_weight"


def test_norm_weight_is_not_all_ones_but_near_one():
    t = generate(ctx("input_layernorm_weight", (4096,), "bfloat16"))
    assert t.dtype == torch.bfloat16
    assert not torch.all(t == 1)
    assert (t != 1).float().mean() > 0.9
    assert abs(t.float().mean().item() - 1.0) < 0.05 and 0.1 < t.float().std().item() < 0.3


@pytest.mark.parametrize("name", ["norm1_bias", "input_layernorm_bias", "ln_1_bias", "beta"])
def test_norm_bias_small_and_nonzero(name):
    assert chosen(name, (256,)) == "norm_bias"
    t = generate(ctx(name, (4096,)))
    assert (t != 0).all() and t.abs().mean() < 0.2 and t.std() > 0.05


def test_causal_mask_square():
    c = ctx("attention_mask", (2, 1, 5, 5), "bfloat16", "Causal attention mask")
    assert choose(c).name == "causal_mask"
    t = generate(c)
    assert t.shape == (2, 1, 5, 5) and t.dtype == torch.bfloat16
    upper = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert (t[0, 0][~upper] == 0).all()
    assert (t[0, 0][upper] == torch.finfo(torch.bfloat16).min).all()
    assert torch.isfinite(t.float()).all()


def test_causal_mask_rectangular_is_bottom_right_aligned():
    t = generate(ctx("mask", (3, 5), "float32", "causal mask"))
    assert t[0].tolist()[:3] == [0, 0, 0] and t[0, 3] < -1e30
    assert (t[2] == 0).all()


def test_causal_needs_description_or_4d_name():
    assert chosen("attention_mask", (4, 4), description="") == "binary_mask"  # 2-D [batch, seq]: padding
    assert chosen("attention_mask", (2, 1, 4, 4), description="") == "causal_mask"
    assert chosen("attention_mask", (2, 8), description="Attention mask (1.0 for valid positions, 0.0 for masked)") \
        == "binary_mask"


def test_binary_mask_values_and_every_row_has_a_one():
    c = ctx("x_mask", (64, 3), "float32", "Optional mask tensor")
    assert choose(c).name == "binary_mask"
    t = generate(c)
    assert set(t.unique().tolist()) <= {0.0, 1.0}
    assert (t.sum(-1) >= 1).all()
    assert (t == 0).any()


def test_additive_mask():
    c = ctx("pad_mask", (64, 4), "float16", "additive, -inf for masked")
    assert choose(c).name == "additive_mask"
    t = generate(c).float()
    assert ((t == 0) | (t == torch.finfo(torch.float16).min)).all()
    assert ((t == 0).sum(-1) >= 1).all()


def test_bool_mask_rows_hold_both_values():
    c = ctx("mask", (50, 2), "bool")
    assert choose(c).name == "bool_mask"
    t = generate(c)
    assert t.any(-1).all() and (~t).any(-1).all()


def test_rope_tables_share_angles():
    cos = generate(ctx("cos", (4, 16, 64)))
    sin = generate(ctx("sin", (4, 16, 64)))
    assert torch.allclose(cos**2 + sin**2, torch.ones_like(cos), atol=1e-5)
    assert not torch.allclose(cos[..., :32], cos[..., 32:])  # unstructured: no duplicated halves
    assert chosen("rope_cos", (2, 3)) == "rope_table" and chosen("sin_cached", (2, 3)) == "rope_table"
    assert chosen("grad_cos", (2, 3)) is None


def test_inv_freq_is_a_decreasing_positive_ladder():
    t = generate(ctx("inv_freq", (64,)))
    assert t[0] == 1 and (t > 0).all() and (t[1:] < t[:-1]).all()
    assert 1e-6 < t[-1] < 1e-3


@pytest.mark.parametrize("name", ["rstd", "x_var", "q_rstd", "variance", "std", "inv_rms"])
def test_positive_stats(name):
    assert chosen(name, (8, 1)) == "positive_stat"
    assert (generate(ctx(name, (1000, 1))) >= 0.1).all()


def test_quant_scales_positive():
    assert chosen("hidden_states_scale", (4, 4), description="Block-wise scaling factors") == "quant_scale"
    assert chosen("weight_scales", (4, 4), dtype="float8_e4m3fn") == "quant_scale"
    assert chosen("shift_scale", (4, 4), description="modulation") is None
    t = generate(ctx("w_scale", (1000,), "float8_e4m3fn"))
    assert (t.float() > 0).all() and torch.isfinite(t.float()).all()


def test_ssm_parameters():
    a_log = generate(ctx("A_log", (1000,), "bfloat16"))
    assert (a_log.float() >= 0).all() and (a_log.float() <= math.log(16) + 0.02).all()
    cums = generate(ctx("A_cumsum", (2, 100)))
    assert (cums <= 0).all() and (cums[:, 1:] <= cums[:, :-1] + 1e-6).all()
    a = generate(ctx("A", (1000,), description="Discretized A parameter (negative log decay)"))
    assert (a < 0).all() and (a > -1.0001).all()
    dt = generate(ctx("dt", (1000,), description="Discretization timestep"))
    assert (dt > 0).all() and (dt <= 0.1).all()
    g = generate(ctx("g", (1000,), description="Decay gate tensor"))
    assert (g < 0).all()


def test_plain_A_of_a_gemm_stays_normal():
    assert chosen("A", (16, 16), dtype="float16") is None
    assert chosen("B", (16, 16), dtype="float16") is None


@pytest.mark.parametrize("name,desc,op_type", [
    ("attn_weights", "Attention weights after softmax", None), ("routing_weights", "", None),
    ("p_attn", "", None), ("probs", "", None), ("token_probs", "", "sampling"),
    ("scores", "Softmax output probabilities", None),
])
def test_probabilities_rows_sum_to_one(name, desc, op_type):
    c = ctx(name, (8, 32), description=desc, op_type=op_type)
    assert choose(c).name == "probabilities"
    t = generate(c)
    assert torch.allclose(t.sum(-1), torch.ones(8), atol=1e-5) and (t > 0).all()


def test_logits_are_not_softmaxed():
    assert chosen("attn_weights", (8, 8), description="Attention logits before softcapping and softmax") is None
    assert chosen("token_probs", (8, 8)) is None  # only for sampling problems


def test_weight_matrix_scaled_by_fan_in():
    c = ctx("q_proj_weight", (256, 4096), "bfloat16")
    assert choose(c).name == "weight_matrix"
    t = generate(c).float()
    assert abs(t.std().item() - 1 / 64) < 0.002
    conv = generate(ctx("conv_weight", (64, 16, 3, 3))).float()
    assert abs(conv.std().item() - 1 / 12) < 0.01
    assert chosen("expert_down_weights", (4, 8, 16)) == "weight_matrix"
    assert chosen("grad_hyper_weights", (4, 8)) is None


def test_position_ids_increase_from_a_nonnegative_offset():
    t = generate(ctx("position_ids", (3, 50), "int64"))
    assert t.dtype == torch.int64 and (t >= 0).all()
    assert (t[:, 1:] - t[:, :-1] == 1).all()


def test_index_like_is_nonnegative():
    c = ctx("token_indices", (10_000,), "int32")
    assert choose(c).name == "index_like"
    assert (generate(c) >= 0).all()


def test_no_heuristic_on_meta_or_fp4():
    assert choose(ctx("input_layernorm_weight", (8,), device="meta")) is None
    assert choose(ctx("weight", (8, 8), "float4_e2m1fn_x2")) is None


def test_fp8_heuristic_values_are_finite():
    t = generate(ctx("input_layernorm_weight", (1000,), "float8_e4m3fn"))
    assert t.dtype == torch.float8_e4m3fn and torch.isfinite(t.float()).all()
