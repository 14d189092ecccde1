# solbench: problem=decoder_layer_prefill_mla_hs7168_h128_qr1536_kvr512_nope128_rope64_v128_ropeinterleave_scale0p135234_swiglu_i18432_eps1e-06
"""A whole decoder layer (pre-norm, multi-head latent attention (hidden 7168, 128 heads, query rank 1536, key/value rank 512, head dims 128+64 (RoPE) / 128 (value), interleaved RoPE), swiglu mlp h7168 i18432) as one fused problem; causal prefill.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["seq_len"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["input_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["attn_q_a_weight"] = torch.randn(1536, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_q_a_norm_weight"] = (1.0 + 0.1 * torch.randn(1536, device=device)).to(torch.bfloat16)
    inputs["attn_q_b_weight"] = torch.randn(24576, 1536, dtype=torch.bfloat16, device=device).mul_(1536 ** -0.5)
    inputs["attn_kv_a_weight"] = torch.randn(576, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["attn_kv_a_norm_weight"] = (1.0 + 0.1 * torch.randn(a["kv_lora_rank"], device=device)).to(torch.bfloat16)
    inputs["attn_kv_b_weight"] = torch.randn(32768, a["kv_lora_rank"], dtype=torch.bfloat16, device=device).mul_(a["kv_lora_rank"] ** -0.5)
    inputs["attn_o_weight"] = torch.randn(a["hidden_size"], 16384, dtype=torch.bfloat16, device=device).mul_(16384 ** -0.5)
    inputs["post_attention_norm_weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["mlp_gate_weight"] = torch.randn(a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["mlp_up_weight"] = torch.randn(a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["mlp_down_weight"] = torch.randn(a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    positions = torch.randint(0, 8192, (a["batch_size"], a["seq_len"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, a["rope_dim"], 2, device=device).float() / (a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    return inputs


HIDDEN_SIZE = 7168
NUM_HEADS = 128
KV_LORA_RANK = 512
QK_NOPE_DIM = 128
QK_ROPE_DIM = 64
V_HEAD_DIM = 128
SCALE = 0.1352337788608801


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


def mlp(x, gate_weight, up_weight, down_weight):
    """Gated MLP: down(act(gate(x)) * up(x))."""
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    return F.linear(F.silu(gate) * up, down_weight)


@torch.no_grad()
def run(hidden_states, input_norm_weight, attn_q_a_weight, attn_q_a_norm_weight, attn_q_b_weight, attn_kv_a_weight, attn_kv_a_norm_weight, attn_kv_b_weight, attn_o_weight, post_attention_norm_weight, mlp_gate_weight, mlp_up_weight, mlp_down_weight, cos, sin):
    """hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""
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
    x = mlp(x, mlp_gate_weight, mlp_up_weight, mlp_down_weight)
    return residual + x
