# solbench: problem=mqa_attention_prefill_h4_kv1_d256_sw512
"""Multi-query causal attention with a sliding window of 512 over full sequences (prefill): 4 query heads, 1 key/value heads, head_dim 256, scale 0.0625.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["q"] = torch.randn(a["batch_size"], a["seq_len"], a["num_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["k"] = torch.randn(a["batch_size"], a["seq_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["v"] = torch.randn(a["batch_size"], a["seq_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    return inputs


NUM_HEADS = 4
NUM_KV_HEADS = 1
HEAD_DIM = 256
SCALE = 0.0625
SLIDING_WINDOW = 512


def attention(q, k, v):
    """Scaled-dot-product attention. q: [batch, heads, q_len, head_dim], k/v: [batch, kv_heads, kv_len, head_dim].

    Queries are the last q_len positions of the kv_len keys, and only the last SLIDING_WINDOW of them (itself included)."""
    q_len, kv_len = q.shape[2], k.shape[2]
    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
    k_pos = torch.arange(kv_len, device=q.device)[None, :]
    allowed = (k_pos <= q_pos) & (q_pos - k_pos < SLIDING_WINDOW)
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=SCALE)


@torch.no_grad()
def run(q, k, v):
    """q: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim] -> [batch, seq, heads, head_dim]."""
    out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2).contiguous()
