# solbench: problem=mqa_attention_prefill_backward_h4_kv1_d256_sw512
"""Backward of causal MQA attention with a sliding window of 512 (4 query heads, 1 key/value heads, head_dim 256): dq, dk, dv with the softmax recomputed.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["q"] = torch.randn(a["batch_size"], a["seq_len"], a["num_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["k"] = torch.randn(a["batch_size"], a["seq_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["v"] = torch.randn(a["batch_size"], a["seq_len"], a["num_kv_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    inputs["grad_output"] = torch.randn(a["batch_size"], a["seq_len"], a["num_heads"], a["head_dim"], dtype=torch.bfloat16, device=device)
    return inputs


NUM_HEADS = 4
NUM_KV_HEADS = 1
HEAD_DIM = 256
SCALE = 0.0625
SLIDING_WINDOW = 512


@torch.no_grad()
def run(q, k, v, grad_output):
    """q, grad_output: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim].

    Recomputes the causal softmax in float32 (each query sees the last SLIDING_WINDOW positions, itself
    included) and returns dq, dk, dv in the input layouts; gradients of query heads that share a key/value
    head are summed onto it."""
    batch, seq = q.shape[0], q.shape[1]
    groups = NUM_HEADS // NUM_KV_HEADS
    qf, kf, vf, go = (t.transpose(1, 2).float() for t in (q, k, v, grad_output))
    kf = kf.repeat_interleave(groups, dim=1)
    vf = vf.repeat_interleave(groups, dim=1)
    pos = torch.arange(seq, device=q.device)
    allowed = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < SLIDING_WINDOW)
    scores = torch.matmul(qf, kf.transpose(-1, -2)).mul_(SCALE)
    scores.masked_fill_(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    del scores
    out = torch.matmul(probs, vf)
    grad_v = torch.matmul(probs.transpose(-1, -2), go)
    delta = (go * out).sum(dim=-1, keepdim=True)
    grad_scores = torch.matmul(go, vf.transpose(-1, -2)).sub_(delta).mul_(probs)  # dsoftmax
    del probs
    grad_q = torch.matmul(grad_scores, kf) * SCALE
    grad_k = torch.matmul(grad_scores.transpose(-1, -2), qf) * SCALE
    grad_k = grad_k.view(batch, NUM_KV_HEADS, groups, seq, HEAD_DIM).sum(dim=2)
    grad_v = grad_v.view(batch, NUM_KV_HEADS, groups, seq, HEAD_DIM).sum(dim=2)
    return (grad_q.transpose(1, 2).to(q.dtype), grad_k.transpose(1, 2).to(k.dtype),
            grad_v.transpose(1, 2).to(v.dtype))
