# solbench: problem=gqa_attention_decode_h40_kv10_d128
"""Grouped-query attention for decode: one query token per sequence against a KV cache of kv_len positions; 40 query heads, 10 key/value heads, head_dim 128, scale 0.0883883.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["q"] = torch.randn(a["batch_size"], a["num_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["k_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["v_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    return inputs


NUM_HEADS = 40
NUM_KV_HEADS = 10
HEAD_DIM = 128
SCALE = 0.08838834764831845


def attention(q, k, v):
    """Scaled-dot-product attention. q: [batch, heads, q_len, head_dim], k/v: [batch, kv_heads, kv_len, head_dim].

    Queries are the last q_len positions of the kv_len keys; a single query (decode) sees the whole cache."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=SCALE, enable_gqa=True)


@torch.no_grad()
def run(q, k_cache, v_cache):
    """One query token per sequence against its KV cache (which already holds the token's own key/value).

    q: [batch, heads, head_dim]; k_cache, v_cache: [batch, kv_len, kv_heads, head_dim] -> [batch, heads, head_dim].
    """
    out = attention(q[:, :, None, :], k_cache.transpose(1, 2), v_cache.transpose(1, 2))
    return out[:, :, 0, :]
