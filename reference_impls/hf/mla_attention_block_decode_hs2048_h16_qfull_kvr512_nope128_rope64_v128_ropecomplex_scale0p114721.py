# solbench: problem=mla_attention_block_decode_hs2048_h16_qfull_kvr512_nope128_rope64_v128_ropecomplex_scale0p114721
"""Multi-head latent attention block (hidden 2048, 16 heads, key/value rank 512, head dims 128+64 (RoPE) / 128 (value), RoPE as a complex product with float32 frequencies); decode: one new token per sequence against a compressed cache of kv_len positions.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["q_weight"] = torch.randn(3072, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["kv_a_weight"] = torch.randn(576, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["kv_a_norm_weight"] = (1.0 + 0.1 * torch.randn(a["kv_lora_rank"], device=device)).to(torch.bfloat16)
    inputs["kv_b_weight"] = torch.randn(4096, a["kv_lora_rank"], dtype=torch.bfloat16, device=device).mul_(a["kv_lora_rank"] ** -0.5)
    inputs["o_weight"] = torch.randn(a["hidden_size"], 2048, dtype=torch.bfloat16, device=device).mul_(2048 ** -0.5)
    positions = torch.randint(0, 8192, (a["batch_size"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 2 * a["rope_pairs"], 2, device=device).float() / (2 * a["rope_pairs"])))
    angles = positions[..., None] * inv_freq
    inputs["cos"] = angles.cos().to(torch.float32)
    inputs["sin"] = angles.sin().to(torch.float32)
    inputs["latent_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["kv_lora_rank"], dtype=torch.bfloat16, device=device)
    inputs["rope_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["rope_dim"], dtype=torch.bfloat16, device=device)
    return inputs


NUM_HEADS = 16
KV_LORA_RANK = 512
QK_NOPE_DIM = 128
QK_ROPE_DIM = 64
V_HEAD_DIM = 128
SCALE = 0.1147213867929261


def rms_norm(x, weight, eps):
    """RMSNorm: normalise in float32, cast back to the input dtype, then scale."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def apply_rope(x, cos, sin):
    """Complex RoPE: each pair (x0, x1), (x2, x3), ... is the complex number x0 + i x1, multiplied by
    cos + i sin in float32; the rotated pair stays in place. cos/sin: [batch, seq, rope_dim // 2] (float32)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    xf = x.float()
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).to(x.dtype)


@torch.no_grad()
def run(hidden_states, q_weight, kv_a_weight, kv_a_norm_weight, kv_b_weight, o_weight, cos, sin, latent_cache, rope_cache):
    """One new token per sequence against the compressed cache.

    hidden_states: [batch, hidden]; cos/sin: [batch, rope_pairs] at the new position; latent_cache: [batch, kv_len,
    kv_lora_rank] (normalised latents) and rope_cache: [batch, kv_len, rope_dim] (rotated keys) of the previous
    positions. Returns the output [batch, hidden] and the new token's latent and RoPE key to append."""
    x = hidden_states[:, None, :]
    cos, sin = cos[:, None], sin[:, None]
    batch, seq = x.shape[0], 1
    q = F.linear(x, q_weight)
    q = q.view(batch, seq, NUM_HEADS, QK_NOPE_DIM + QK_ROPE_DIM).transpose(1, 2)
    q_nope, q_rot = q.split([QK_NOPE_DIM, QK_ROPE_DIM], dim=-1)
    latent, k_rot = F.linear(x, kv_a_weight).split([KV_LORA_RANK, QK_ROPE_DIM], dim=-1)
    latent = rms_norm(latent, kv_a_norm_weight, 1e-06)
    k_rot = k_rot.view(batch, 1, seq, QK_ROPE_DIM)
    q_rot, k_rot = apply_rope(q_rot, cos, sin), apply_rope(k_rot, cos, sin)
    q = torch.cat((q_nope, q_rot), dim=-1)
    latent_new, rope_new = latent[:, 0], k_rot[:, 0, 0]
    latent = torch.cat((latent_cache, latent), dim=1)
    k_rot = torch.cat((rope_cache[:, None], k_rot), dim=2)
    kv_len = latent.shape[1]
    kv = F.linear(latent, kv_b_weight).view(batch, kv_len, NUM_HEADS, QK_NOPE_DIM + V_HEAD_DIM).transpose(1, 2)
    k_nope, v = kv.split([QK_NOPE_DIM, V_HEAD_DIM], dim=-1)
    k = torch.cat((k_nope, k_rot.expand(-1, NUM_HEADS, -1, -1)), dim=-1)
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=SCALE)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * V_HEAD_DIM)
    output = F.linear(attn, o_weight)
    return output[:, 0], latent_new, rope_new
