# solbench: problem=decoder_layer_decode_mla_hs7168_h128_qr1536_kvr512_nope128_rope64_v128_ropeinterleave_scale0p135234_moe_sigmoid_grouped_e256_k8_i2048_shared2048_eps1e-06
"""A whole decoder layer (pre-norm, multi-head latent attention (hidden 7168, 128 heads, query rank 1536, key/value rank 512, head dims 128+64 (RoPE) / 128 (value), interleaved RoPE), MoE with 256 experts (top 8) plus a shared expert) as one fused problem; decode: one new token per sequence against a compressed cache (latents and RoPE keys) of kv_len previous positions, returning the new cache entries too.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["input_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["attn_q_a_weight"] = torch.randn(1536, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_q_a_norm_weight"] = (1.0 + 0.1 * torch.randn(1536, device=device)).to(torch.bfloat16)
    inputs["attn_q_b_weight"] = torch.randn(24576, 1536, dtype=torch.bfloat16, device=device).mul_(1536 ** -0.5)
    inputs["attn_kv_a_weight"] = torch.randn(576, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_kv_a_norm_weight"] = (1.0 + 0.1 * torch.randn(a["kv_lora_rank"], device=device)).to(torch.bfloat16)
    inputs["attn_kv_b_weight"] = torch.randn(32768, a["kv_lora_rank"], dtype=torch.bfloat16, device=device).mul_(a["kv_lora_rank"] ** -0.5)
    inputs["attn_o_weight"] = torch.randn(a["hidden_size"], 16384, dtype=torch.bfloat16, device=device).mul_(16384 ** -0.5)
    inputs["post_attention_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["moe_router_weight"] = torch.randn(a["num_experts"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["moe_score_bias"] = (0.1 * torch.randn(a["num_experts"], device=device)).to(torch.float32)
    inputs["moe_gate_up_weight"] = torch.randn(a["num_experts"], 4096, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["moe_down_weight"] = torch.randn(a["num_experts"], a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    inputs["shared_gate_weight"] = torch.randn(a["shared_intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["shared_up_weight"] = torch.randn(a["shared_intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["shared_down_weight"] = torch.randn(a["hidden_size"], a["shared_intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["shared_intermediate_size"] ** -0.5)
    positions = torch.randint(0, 8192, (a["batch_size"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, a["rope_dim"], 2, device=device).float() / (a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    inputs["latent_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["kv_lora_rank"], dtype=torch.bfloat16, device=device)
    inputs["rope_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["rope_dim"], dtype=torch.bfloat16, device=device)
    return inputs


HIDDEN_SIZE = 7168
NUM_HEADS = 128
KV_LORA_RANK = 512
QK_NOPE_DIM = 128
QK_ROPE_DIM = 64
V_HEAD_DIM = 128
SCALE = 0.1352337788608801
TOP_K = 8
NUM_GROUPS = 8
TOPK_GROUPS = 4
ROUTED_SCALING = 2.5


def rms_norm(x, weight, eps):
    """RMSNorm: normalise in float32, cast back to the input dtype, then scale."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def apply_rope(x, cos, sin):
    """Interleaved RoPE: pairs (x0, x1), (x2, x3), ... rotate together and the result lists the rotated first
    elements of every pair, then the second ones. cos/sin: [batch, seq, rope_dim] (halves repeat the angles)."""
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(1)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def route(x, router_weight, score_bias):
    """Sigmoid scores; the bias only steers selection. Experts come from the TOPK_GROUPS groups whose two best
    biased scores sum highest. Expert ids are sorted by descending biased score."""
    logits = F.linear(x.float(), router_weight.float())
    scores = logits.sigmoid()
    choice = scores + score_bias
    num_experts = router_weight.shape[0]
    per_group = num_experts // NUM_GROUPS
    group_scores = choice.view(-1, NUM_GROUPS, per_group).topk(2, dim=-1).values.sum(dim=-1)
    top_groups = torch.topk(group_scores, TOPK_GROUPS, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, top_groups, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand(-1, NUM_GROUPS, per_group).reshape(-1, num_experts)
    choice = choice.masked_fill(~expert_mask.bool(), float("-inf"))
    topk_ids = torch.topk(choice, TOP_K, dim=-1).indices
    topk_weights = scores.gather(1, topk_ids)
    topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
    return topk_weights * ROUTED_SCALING, topk_ids


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


def mlp(x, gate_weight, up_weight, down_weight):
    """Gated MLP: down(act(gate(x)) * up(x))."""
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    return F.linear(F.silu(gate) * up, down_weight)


@torch.no_grad()
def run(hidden_states, input_norm_weight, attn_q_a_weight, attn_q_a_norm_weight, attn_q_b_weight, attn_kv_a_weight, attn_kv_a_norm_weight, attn_kv_b_weight, attn_o_weight, post_attention_norm_weight, moe_router_weight, moe_score_bias, moe_gate_up_weight, moe_down_weight, shared_gate_weight, shared_up_weight, shared_down_weight, cos, sin, latent_cache, rope_cache):
    """One new token per sequence against the cache of the previous kv_len positions.

    hidden_states: [batch, hidden]; latent_cache: [batch, kv_len, kv_lora_rank]; rope_cache: [batch, kv_len, rope_dim].
    Returns the layer output [batch, hidden] and the new token's latent_new, rope_new (to append to the cache)."""
    hidden_states = hidden_states[:, None, :]
    cos, sin = cos[:, None], sin[:, None]
    residual = hidden_states
    x = rms_norm(hidden_states, input_norm_weight, 1e-06)
    batch, seq = x.shape[0], x.shape[1]
    q = F.linear(rms_norm(F.linear(x, attn_q_a_weight), attn_q_a_norm_weight, 1e-06), attn_q_b_weight)
    q = q.view(batch, seq, NUM_HEADS, QK_NOPE_DIM + QK_ROPE_DIM).transpose(1, 2)
    q_nope, q_rot = q.split([QK_NOPE_DIM, QK_ROPE_DIM], dim=-1)
    latent, k_rot = F.linear(x, attn_kv_a_weight).split([KV_LORA_RANK, QK_ROPE_DIM], dim=-1)
    latent = rms_norm(latent, attn_kv_a_norm_weight, 1e-06)
    k_rot = k_rot.view(batch, 1, seq, QK_ROPE_DIM)
    q_rot, k_rot = apply_rope(q_rot, cos, sin), apply_rope(k_rot, cos, sin)
    q = torch.cat((q_nope, q_rot), dim=-1)
    latent_new, rope_new = latent[:, 0], k_rot[:, 0, 0]
    latent = torch.cat((latent_cache, latent), dim=1)
    k_rot = torch.cat((rope_cache[:, None], k_rot), dim=2)
    kv_len = latent.shape[1]
    kv = F.linear(latent, attn_kv_b_weight).view(batch, kv_len, NUM_HEADS, QK_NOPE_DIM + V_HEAD_DIM).transpose(1, 2)
    k_nope, v = kv.split([QK_NOPE_DIM, V_HEAD_DIM], dim=-1)
    k = torch.cat((k_nope, k_rot.expand(-1, NUM_HEADS, -1, -1)), dim=-1)
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=SCALE)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * V_HEAD_DIM)
    x = F.linear(attn, attn_o_weight)
    hidden_states = residual + x
    residual = hidden_states
    x = rms_norm(hidden_states, post_attention_norm_weight, 1e-06)
    flat = x.reshape(-1, HIDDEN_SIZE)
    topk_weights, topk_ids = route(flat, moe_router_weight, moe_score_bias)
    y = experts(flat, topk_ids, topk_weights, moe_gate_up_weight, moe_down_weight)
    y = y + mlp(flat, shared_gate_weight, shared_up_weight, shared_down_weight)
    x = y.view_as(x)
    output = residual + x
    return output[:, 0], latent_new, rope_new
