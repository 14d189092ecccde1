# solbench: problem=attention_block_prefill_hs1024_h16_kv8_d128_qknorm
"""GQA attention block (q/k/v projections, per-head QK RMSNorm, RoPE, attention, output projection): hidden 1024, 16 query heads, 8 key/value heads, head_dim 128; causal prefill over full sequences.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["seq_len"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["q_weight"] = torch.randn(2048, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["k_weight"] = torch.randn(1024, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["v_weight"] = torch.randn(1024, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["o_weight"] = torch.randn(a["hidden_size"], 2048, dtype=torch.bfloat16, device=device).mul_(2048 ** -0.5)
    inputs["q_norm_weight"] = (1.0 + 0.1 * torch.randn(a["head_dim"], device=device)).to(torch.bfloat16)
    inputs["k_norm_weight"] = (1.0 + 0.1 * torch.randn(a["head_dim"], device=device)).to(torch.bfloat16)
    positions = torch.randint(0, 8192, (a["batch_size"], a["seq_len"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, a["rope_dim"], 2, device=device).float() / (a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    return inputs


HIDDEN_SIZE = 1024
NUM_HEADS = 16
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


@torch.no_grad()
def run(hidden_states, q_weight, k_weight, v_weight, o_weight, q_norm_weight, k_norm_weight, cos, sin):
    """hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""
    batch, seq = hidden_states.shape[0], hidden_states.shape[1]
    q = F.linear(hidden_states, q_weight).view(batch, seq, NUM_HEADS, HEAD_DIM)
    k = F.linear(hidden_states, k_weight).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    v = F.linear(hidden_states, v_weight).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    q = rms_norm(q, q_norm_weight, 1e-06)
    k = rms_norm(k, k_norm_weight, 1e-06)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    attn = attention(q, k, v)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * HEAD_DIM)
    output = F.linear(attn, o_weight)
    return output
