# solbench: problem=decoder_layer_decode_hs2048_h32_kv4_d128_qknorm_moe_softmax_topk_e128_k8_i768_eps1e-06
"""A whole decoder layer (pre-norm, GQA attention with 32/4 heads of 128, MoE with 128 experts (top 8)) as one fused problem; decode: one new token per sequence against a KV cache of kv_len previous positions, returning the new cache entries too.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["input_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["attn_q_weight"] = torch.randn(4096, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_k_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_v_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_o_weight"] = torch.randn(a["hidden_size"], 4096, dtype=torch.bfloat16, device=device).mul_(4096 ** -0.5)
    inputs["attn_q_norm_weight"] = (1.0 + 0.1 * torch.randn(a["head_dim"], device=device)).to(torch.bfloat16)
    inputs["attn_k_norm_weight"] = (1.0 + 0.1 * torch.randn(a["head_dim"], device=device)).to(torch.bfloat16)
    inputs["post_attention_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["moe_router_weight"] = torch.randn(a["num_experts"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["moe_gate_up_weight"] = torch.randn(a["num_experts"], 1536, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["moe_down_weight"] = torch.randn(a["num_experts"], a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    positions = torch.randint(0, 8192, (a["batch_size"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, a["rope_dim"], 2, device=device).float() / (a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    inputs["k_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["v_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    return inputs


HIDDEN_SIZE = 2048
NUM_HEADS = 32
NUM_KV_HEADS = 4
HEAD_DIM = 128
SCALE = 0.08838834764831845
TOP_K = 8


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


def route(x, router_weight):
    """Softmax over all experts in float32, keep the TOP_K largest, renormalised to sum to 1.
    Expert ids are sorted by descending weight."""
    logits = F.linear(x, router_weight)
    probs = torch.softmax(logits.float(), dim=-1)
    topk_weights, topk_ids = torch.topk(probs, TOP_K, dim=-1)
    topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return topk_weights.to(logits.dtype), topk_ids


def experts(x, topk_ids, topk_weights, gate_up_weight, down_weight):
    """Routed gated experts; only experts some token selected are computed, found as the modules find them
    (a one-hot mask with one class more than experts: the modules' slot for a token routed nowhere).
    x: [tokens, hidden]; gate_up_weight: [experts, 2 * intermediate, hidden] (gate rows first);
    down_weight: [experts, hidden, intermediate]."""
    output = torch.zeros_like(x)
    num_experts = gate_up_weight.shape[0]
    expert_mask = F.one_hot(topk_ids, num_classes=num_experts + 1).permute(2, 1, 0)
    for expert in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        if expert == num_experts:
            continue
        slot, token_idx = torch.where(expert_mask[expert])
        gate, up = F.linear(x[token_idx], gate_up_weight[expert]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down_weight[expert])
        y = y * topk_weights[token_idx, slot, None]
        output.index_add_(0, token_idx, y.to(output.dtype))
    return output


@torch.no_grad()
def run(hidden_states, input_norm_weight, attn_q_weight, attn_k_weight, attn_v_weight, attn_o_weight, attn_q_norm_weight, attn_k_norm_weight, post_attention_norm_weight, moe_router_weight, moe_gate_up_weight, moe_down_weight, cos, sin, k_cache, v_cache):
    """One new token per sequence against the cache of the previous kv_len positions.

    hidden_states: [batch, hidden]; k_cache: [batch, kv_len, num_kv_heads, head_dim]; v_cache: [batch, kv_len, num_kv_heads, head_dim].
    Returns the layer output [batch, hidden] and the new token's k_new, v_new (to append to the cache)."""
    hidden_states = hidden_states[:, None, :]
    cos, sin = cos[:, None], sin[:, None]
    residual = hidden_states
    x = rms_norm(hidden_states, input_norm_weight, 1e-06)
    batch, seq = x.shape[0], x.shape[1]
    q = F.linear(x, attn_q_weight).view(batch, seq, NUM_HEADS, HEAD_DIM)
    k = F.linear(x, attn_k_weight).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    v = F.linear(x, attn_v_weight).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    q = rms_norm(q, attn_q_norm_weight, 1e-06)
    k = rms_norm(k, attn_k_norm_weight, 1e-06)
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
    x = rms_norm(hidden_states, post_attention_norm_weight, 1e-06)
    flat = x.reshape(-1, HIDDEN_SIZE)
    topk_weights, topk_ids = route(flat, moe_router_weight)
    y = experts(flat, topk_ids, topk_weights, moe_gate_up_weight, moe_down_weight)
    x = y.view_as(x)
    output = residual + x
    return output[:, 0], k_new, v_new
