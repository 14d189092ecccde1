# solbench: problem=attention_block_bidirectional_hs768_h12_kv12_d64_qkvbias_obias_norope
"""MHA attention block (q/k/v projections, attention, output projection): hidden 768, 12 query heads, 12 key/value heads, head_dim 64; bidirectional over full sequences.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["seq_len"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["q_weight"] = torch.randn(768, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["q_bias"] = (0.1 * torch.randn(768, device=device)).to(torch.bfloat16)
    inputs["k_weight"] = torch.randn(768, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["k_bias"] = (0.1 * torch.randn(768, device=device)).to(torch.bfloat16)
    inputs["v_weight"] = torch.randn(768, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["v_bias"] = (0.1 * torch.randn(768, device=device)).to(torch.bfloat16)
    inputs["o_weight"] = torch.randn(a["hidden_size"], 768, dtype=torch.bfloat16, device=device).mul_(768 ** -0.5)
    inputs["o_bias"] = (0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    return inputs


HIDDEN_SIZE = 768
NUM_HEADS = 12
NUM_KV_HEADS = 12
HEAD_DIM = 64
SCALE = 0.125


def attention(q, k, v):
    """Bidirectional attention. q: [batch, heads, len, head_dim], k/v: [batch, kv_heads, len, head_dim]."""
    return F.scaled_dot_product_attention(q, k, v, scale=SCALE, enable_gqa=True)


@torch.no_grad()
def run(hidden_states, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight, o_bias):
    """hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""
    batch, seq = hidden_states.shape[0], hidden_states.shape[1]
    q = F.linear(hidden_states, q_weight, q_bias).view(batch, seq, NUM_HEADS, HEAD_DIM)
    k = F.linear(hidden_states, k_weight, k_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    v = F.linear(hidden_states, v_weight, v_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    attn = attention(q, k, v)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * HEAD_DIM)
    output = F.linear(attn, o_weight, o_bias)
    return output
