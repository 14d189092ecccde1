# solbench: problem=mha_attention_bidirectional_h12_kv12_d64
"""Multi-head bidirectional attention over full sequences (prefill): 12 query heads, 12 key/value heads, head_dim 64, scale 0.125.

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


NUM_HEADS = 12
NUM_KV_HEADS = 12
HEAD_DIM = 64
SCALE = 0.125


def attention(q, k, v):
    """Bidirectional attention. q: [batch, heads, len, head_dim], k/v: [batch, kv_heads, len, head_dim]."""
    return F.scaled_dot_product_attention(q, k, v, scale=SCALE, enable_gqa=True)


@torch.no_grad()
def run(q, k, v):
    """q: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim] -> [batch, seq, heads, head_dim]."""
    out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2).contiguous()
