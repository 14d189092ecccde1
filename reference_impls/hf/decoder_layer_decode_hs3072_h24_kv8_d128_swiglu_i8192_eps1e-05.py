# solbench: problem=decoder_layer_decode_hs3072_h24_kv8_d128_swiglu_i8192_eps1e-05
"""A whole decoder layer (pre-norm, GQA attention with 24/8 heads of 128, swiglu mlp h3072 i8192) as one fused problem; decode: one new token per sequence against a KV cache of kv_len previous positions, returning the new cache entries too.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["input_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["attn_q_weight"] = torch.randn(3072, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_k_weight"] = torch.randn(1024, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_v_weight"] = torch.randn(1024, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_o_weight"] = torch.randn(a["hidden_size"], 3072, dtype=torch.bfloat16, device=device).mul_(3072 ** -0.5)
    inputs["post_attention_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["mlp_gate_weight"] = torch.randn(a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["mlp_up_weight"] = torch.randn(a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["mlp_down_weight"] = torch.randn(a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    positions = torch.randint(0, 8192, (a["batch_size"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, a["rope_dim"], 2, device=device).float() / (a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    inputs["k_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["v_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    return inputs


HIDDEN_SIZE = 3072
NUM_HEADS = 24
NUM_KV_HEADS = 8
HEAD_DIM = 128
SCALE = 0.08838834764831845


def rms_norm(x, weight, eps):
    """RMSNorm: normalise in float32, cast back to the input dtype, then scale."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def apply_rope(x, cos, sin):
    """Rotate-half RoPE. x: [batch, heads, seq, head_dim]; cos/sin: [batch, seq, head_dim]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def attention(q, k, v):
    """Scaled-dot-product attention. q: [batch, heads, q_len, head_dim], k/v: [batch, kv_heads, kv_len, head_dim].

    Queries are the last q_len positions of the kv_len keys; a single query (decode) sees the whole cache."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=SCALE, enable_gqa=True)


def mlp(x, gate_weight, up_weight, down_weight):
    """Gated MLP: down(act(gate(x)) * up(x))."""
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    return F.linear(F.silu(gate) * up, down_weight)


@torch.no_grad()
def run(hidden_states, input_norm_weight, attn_q_weight, attn_k_weight, attn_v_weight, attn_o_weight, post_attention_norm_weight, mlp_gate_weight, mlp_up_weight, mlp_down_weight, cos, sin, k_cache, v_cache):
    """One new token per sequence against the cache of the previous kv_len positions.

    hidden_states: [batch, hidden]; k_cache: [batch, kv_len, num_kv_heads, head_dim]; v_cache: [batch, kv_len, num_kv_heads, head_dim].
    Returns the layer output [batch, hidden] and the new token's k_new, v_new (to append to the cache)."""
    hidden_states = hidden_states[:, None, :]
    cos, sin = cos[:, None], sin[:, None]
    residual = hidden_states
    x = rms_norm(hidden_states, input_norm_weight, 1e-05)
    batch, seq = x.shape[0], x.shape[1]
    q = F.linear(x, attn_q_weight).view(batch, seq, NUM_HEADS, HEAD_DIM)
    k = F.linear(x, attn_k_weight).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    v = F.linear(x, attn_v_weight).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k_new, v_new = k[:, :, 0], v[:, :, 0]
    k = torch.cat((k_cache.transpose(1, 2), k), dim=2)
    v = torch.cat((v_cache.transpose(1, 2), v), dim=2)
    attn = attention(q, k, v)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * HEAD_DIM)
    x = F.linear(attn, attn_o_weight)
    hidden_states = residual + x
    residual = hidden_states
    x = rms_norm(hidden_states, post_attention_norm_weight, 1e-05)
    x = mlp(x, mlp_gate_weight, mlp_up_weight, mlp_down_weight)
    output = residual + x
    return output[:, 0], k_new, v_new
