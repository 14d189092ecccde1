# solbench: problem=attention_block_prefill_hs2880_h64_kv8_d64_qkvbias_obias_ropehalf_sinks
"""GQA attention block (q/k/v projections, RoPE, attention, output projection): hidden 2880, 64 query heads, 8 key/value heads, head_dim 64, learned sinks; causal prefill over full sequences.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["batch_size"], a["seq_len"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["q_weight"] = torch.randn(4096, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["q_bias"] = (0.1 * torch.randn(4096, device=device)).to(torch.bfloat16)
    inputs["k_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["k_bias"] = (0.1 * torch.randn(512, device=device)).to(torch.bfloat16)
    inputs["v_weight"] = torch.randn(512, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["v_bias"] = (0.1 * torch.randn(512, device=device)).to(torch.bfloat16)
    inputs["o_weight"] = torch.randn(a["hidden_size"], 4096, dtype=torch.bfloat16, device=device).mul_(4096 ** -0.5)
    inputs["o_bias"] = (0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["sinks"] = torch.randn(a["num_heads"], dtype=torch.bfloat16, device=device)
    positions = torch.randint(0, 8192, (a["batch_size"], a["seq_len"],), device=device).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 2 * a["rope_dim"], 2, device=device).float() / (2 * a["rope_dim"])))
    angles = positions[..., None] * inv_freq
    inputs["cos"] = angles.cos().to(torch.bfloat16)
    inputs["sin"] = angles.sin().to(torch.bfloat16)
    return inputs


HIDDEN_SIZE = 2880
NUM_HEADS = 64
NUM_KV_HEADS = 8
HEAD_DIM = 64
SCALE = 0.125


def apply_rope(x, cos, sin):
    """RoPE on the two halves of head_dim. x: [batch, heads, seq, head_dim]; cos/sin: [batch, seq, head_dim // 2]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def attention(q, k, v, sinks):
    """Scaled-dot-product attention. q: [batch, heads, q_len, head_dim], k/v: [batch, kv_heads, kv_len, head_dim].

    Queries are the last q_len positions of the kv_len keys; a learned per-head sink logit takes probability mass but has no value."""
    q_len, kv_len = q.shape[2], k.shape[2]
    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
    k_pos = torch.arange(kv_len, device=q.device)[None, :]
    allowed = k_pos <= q_pos
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
def run(hidden_states, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight, o_bias, sinks, cos, sin):
    """hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""
    batch, seq = hidden_states.shape[0], hidden_states.shape[1]
    q = F.linear(hidden_states, q_weight, q_bias).view(batch, seq, NUM_HEADS, HEAD_DIM)
    k = F.linear(hidden_states, k_weight, k_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    v = F.linear(hidden_states, v_weight, v_bias).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    attn = attention(q, k, v, sinks)
    attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * HEAD_DIM)
    output = F.linear(attn, o_weight, o_bias)
    return output
