# solbench: problem=attention_block_decode_hs3584_h28_kv4_d128_qkvbias
"""GQA attention block (q/k/v projections, RoPE, attention, output projection): hidden 3584, 28 query heads, 4 key/value heads, head_dim 128; decode: one new token per sequence attends to a KV cache of kv_len previous positions plus itself.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["q_weight"] = torch.randn(3584, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["q_bias"] = (0.1 * torch.randn(3584, device=device)).to(torch.bfloat16)
    inputs["k_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["k_bias"] = (0.1 * torch.randn(512, device=device)).to(torch.bfloat16)
    inputs["v_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["v_bias"] = (0.1 * torch.randn(512, device=device)).to(torch.bfloat16)
    inputs["o_weight"] = torch.randn(a["hidden_size"], 3584, dtype=torch.bfloat16, device=device).mul_(3584 ** -0.5)
    positions = torch.randint(0, 8192, (a["batch_size"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, a["rope_dim"], 2, device=device).float() / (a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    inputs["k_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["v_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    return inputs


HIDDEN_SIZE = 3584
NUM_HEADS = 28
NUM_KV_HEADS = 4
HEAD_DIM = 128
SCALE = 0.08838834764831845


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
def run(hidden_states, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight, cos, sin, k_cache, v_cache):
    """One new token per sequence. hidden_states: [batch, hidden]; k_cache/v_cache: [batch, kv_len, kv_heads,
    head_dim] hold the previous positions. Returns the block output [batch, hidden] and the new token's key and
    value [batch, kv_heads, head_dim] (to append to the cache)."""
    x = hidden_states[:, None, :]
    cos, sin = cos[:, None], sin[:, None]
    batch, seq = x.shape[0], x.shape[1]
    q = F.linear(x, q_weight, q_bias).view(batch, seq, NUM_HEADS, HEAD_DIM)
    k = F.linear(x, k_weight, k_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    v = F.linear(x, v_weight, v_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k_new, v_new = k[:, :, 0], v[:, :, 0]
    k = torch.cat((k_cache.transpose(1, 2), k), dim=2)
    v = torch.cat((v_cache.transpose(1, 2), v), dim=2)
    attn = attention(q, k, v)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * HEAD_DIM)
    output = F.linear(attn, o_weight)
    return output[:, 0], k_new, v_new
