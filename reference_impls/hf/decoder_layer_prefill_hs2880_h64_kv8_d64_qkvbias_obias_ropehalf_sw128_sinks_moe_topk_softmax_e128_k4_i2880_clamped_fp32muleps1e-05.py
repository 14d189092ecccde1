# solbench: problem=decoder_layer_prefill_hs2880_h64_kv8_d64_qkvbias_obias_ropehalf_sw128_sinks_moe_topk_softmax_e128_k4_i2880_clamped_fp32muleps1e-05
"""A whole decoder layer (pre-norm, GQA attention with 64/8 heads of 64, MoE with 128 experts (top 4)) as one fused problem; causal prefill.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["seq_len"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["input_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["attn_q_weight"] = torch.randn(4096, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_q_bias"] = (0.1 * torch.randn(4096, device=device)).to(torch.bfloat16)
    inputs["attn_k_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_k_bias"] = (0.1 * torch.randn(512, device=device)).to(torch.bfloat16)
    inputs["attn_v_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_v_bias"] = (0.1 * torch.randn(512, device=device)).to(torch.bfloat16)
    inputs["attn_o_weight"] = torch.randn(a["hidden_size"], 4096, dtype=torch.bfloat16, device=device).mul_(4096 ** -0.5)
    inputs["attn_o_bias"] = (0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["attn_sinks"] = torch.randn(a["num_heads"], dtype=torch.bfloat16, device=device)
    inputs["post_attention_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["moe_router_weight"] = torch.randn(a["num_experts"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["moe_router_bias"] = (0.1 * torch.randn(a["num_experts"], device=device)).to(torch.bfloat16)
    inputs["moe_gate_up_weight"] = torch.randn(a["num_experts"], a["hidden_size"], 5760, dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["moe_gate_up_bias"] = (0.1 * torch.randn(a["num_experts"], 5760, device=device)).to(torch.bfloat16)
    inputs["moe_down_weight"] = torch.randn(a["num_experts"], a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    inputs["moe_down_bias"] = (0.1 * torch.randn(a["num_experts"], a["hidden_size"], device=device)).to(torch.bfloat16)
    positions = torch.randint(0, 8192, (a["batch_size"], a["seq_len"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 2 * a["rope_dim"], 2, device=device).float() / (2 * a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    return inputs


HIDDEN_SIZE = 2880
NUM_HEADS = 64
NUM_KV_HEADS = 8
HEAD_DIM = 64
SCALE = 0.125
SLIDING_WINDOW = 128
TOP_K = 4
ALPHA = 1.702
LIMIT = 7.0


def rms_norm(x, weight, eps):
    """RMSNorm: normalise and scale in float32, then cast back to the input dtype."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h).to(x.dtype)


def apply_rope(x, cos, sin):
    """RoPE on the two halves of head_dim. x: [batch, heads, seq, head_dim]; cos/sin: [batch, seq, head_dim // 2]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def attention(q, k, v, sinks):
    """Scaled-dot-product attention. q: [batch, heads, q_len, head_dim], k/v: [batch, kv_heads, kv_len, head_dim].

    Queries are the last q_len positions of the kv_len keys, and only the last SLIDING_WINDOW of them (itself included); a learned per-head sink logit takes probability mass but has no value."""
    q_len, kv_len = q.shape[2], k.shape[2]
    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
    k_pos = torch.arange(kv_len, device=q.device)[None, :]
    allowed = (k_pos <= q_pos) & (q_pos - k_pos < SLIDING_WINDOW)
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * SCALE
    scores = scores.masked_fill(~allowed, float("-inf"))
    sink = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q_len, 1).to(scores.dtype)
    logits = torch.cat([scores, sink], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    probs = torch.softmax(logits, dim=-1)[..., :-1]
    return torch.matmul(probs.to(v.dtype), v)


def route(x, router_weight, router_bias):
    """Keep the TOP_K largest logits, then softmax over just those. Expert ids are sorted by descending weight."""
    logits = F.linear(x, router_weight, router_bias)
    top_logits, topk_ids = torch.topk(logits, TOP_K, dim=-1)
    return torch.softmax(top_logits, dim=-1), topk_ids


def experts(x, topk_ids, topk_weights, gate_up_weight, gate_up_bias, down_weight, down_bias):
    """Routed experts with interleaved gate/up columns, clamping and biases; only selected experts run.
    x: [tokens, hidden]; gate_up_weight: [experts, hidden, 2 * intermediate]; down_weight: [experts, intermediate, hidden]."""
    output = torch.zeros_like(x)
    expert_mask = F.one_hot(topk_ids, num_classes=gate_up_weight.shape[0]).permute(2, 1, 0)
    for expert in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        slot, token_idx = torch.where(expert_mask[expert])
        gate_up = x[token_idx] @ gate_up_weight[expert] + gate_up_bias[expert]
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(max=LIMIT)
        up = up.clamp(min=-LIMIT, max=LIMIT)
        h = (up + 1) * (gate * torch.sigmoid(gate * ALPHA))
        y = h @ down_weight[expert] + down_bias[expert]
        y = y * topk_weights[token_idx, slot, None]
        output.index_add_(0, token_idx, y.to(output.dtype))
    return output


@torch.no_grad()
def run(hidden_states, input_norm_weight, attn_q_weight, attn_q_bias, attn_k_weight, attn_k_bias, attn_v_weight, attn_v_bias, attn_o_weight, attn_o_bias, attn_sinks, post_attention_norm_weight, moe_router_weight, moe_router_bias, moe_gate_up_weight, moe_gate_up_bias, moe_down_weight, moe_down_bias, cos, sin):
    """hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""
    residual = hidden_states
    x = rms_norm(hidden_states, input_norm_weight, 1e-05)
    batch, seq = x.shape[0], x.shape[1]
    q = F.linear(x, attn_q_weight, attn_q_bias).view(batch, seq, NUM_HEADS, HEAD_DIM)
    k = F.linear(x, attn_k_weight, attn_k_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    v = F.linear(x, attn_v_weight, attn_v_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    attn = attention(q, k, v, attn_sinks)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * HEAD_DIM)
    x = F.linear(attn, attn_o_weight, attn_o_bias)
    hidden_states = residual + x
    residual = hidden_states
    x = rms_norm(hidden_states, post_attention_norm_weight, 1e-05)
    flat = x.reshape(-1, HIDDEN_SIZE)
    topk_weights, topk_ids = route(flat, moe_router_weight, moe_router_bias)
    y = experts(flat, topk_ids, topk_weights, moe_gate_up_weight, moe_gate_up_bias, moe_down_weight, moe_down_bias)
    x = y.view_as(x)
    return residual + x
