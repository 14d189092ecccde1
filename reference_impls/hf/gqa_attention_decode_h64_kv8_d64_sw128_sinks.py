# solbench: problem=gqa_attention_decode_h64_kv8_d64_sw128_sinks
"""Grouped-query attention with a sliding window of 128 and learned attention sinks for decode: one query token per sequence against a KV cache of kv_len positions; 64 query heads, 8 key/value heads, head_dim 64, scale 0.125.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["q"] = torch.randn(a["batch_size"], a["num_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["k_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["v_cache"] = torch.randn(a["batch_size"], a["kv_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["sinks"] = torch.randn(a["num_heads"], dtype=torch.bfloat16, device=device)
    return inputs


NUM_HEADS = 64
NUM_KV_HEADS = 8
HEAD_DIM = 64
SCALE = 0.125
SLIDING_WINDOW = 128


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


@torch.no_grad()
def run(q, k_cache, v_cache, sinks):
    """One query token per sequence against its KV cache (which already holds the token's own key/value).

    q: [batch, heads, head_dim]; k_cache, v_cache: [batch, kv_len, kv_heads, head_dim] -> [batch, heads, head_dim].
    """
    out = attention(q[:, :, None, :], k_cache.transpose(1, 2), v_cache.transpose(1, 2), sinks)
    return out[:, :, 0, :]
