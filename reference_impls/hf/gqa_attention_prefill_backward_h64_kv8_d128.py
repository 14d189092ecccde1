# solbench: problem=gqa_attention_prefill_backward_h64_kv8_d128
"""Backward of causal GQA attention (64 query heads, 8 key/value heads, head_dim 128): dq, dk, dv with the softmax recomputed.

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


NUM_HEADS = 64
NUM_KV_HEADS = 8
HEAD_DIM = 128
SCALE = 0.08838834764831845
SCORE_BLOCK_ELEMENTS = 1 << 27  # float32 elements in one [batch, heads, rows, keys] buffer of a query block


@torch.no_grad()
def run(q, k, v, grad_output):
    """q, grad_output: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim].

    Recomputes the causal softmax in float32 and returns dq, dk, dv in the input layouts; gradients of query
    heads that share a key/value head are summed onto it. Query rows go in blocks, each against the keys up to
    its last row, so no [batch, heads, seq, seq] buffer is built; dk and dv accumulate over the blocks."""
    batch, seq = q.shape[0], q.shape[1]
    groups = NUM_HEADS // NUM_KV_HEADS
    qf, kf, vf, go = (t.transpose(1, 2).float() for t in (q, k, v, grad_output))
    kf = kf.repeat_interleave(groups, dim=1)
    vf = vf.repeat_interleave(groups, dim=1)
    grad_q, grad_k, grad_v = torch.empty_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
    pos = torch.arange(seq, device=q.device)
    rows = max(1, SCORE_BLOCK_ELEMENTS // (batch * NUM_HEADS * seq))
    for start in range(0, seq, rows):
        end = min(start + rows, seq)  # queries start..end-1 see keys 0..end-1 at most
        qb, gob, kb, vb = qf[:, :, start:end], go[:, :, start:end], kf[:, :, :end], vf[:, :, :end]
        scores = torch.matmul(qb, kb.transpose(-1, -2)) * SCALE
        causal = pos[None, :end] <= pos[start:end, None]
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        out = torch.matmul(probs, vb)
        grad_v[:, :, :end] += torch.matmul(probs.transpose(-1, -2), gob)
        grad_probs = torch.matmul(gob, vb.transpose(-1, -2))
        grad_scores = probs * (grad_probs - (gob * out).sum(dim=-1, keepdim=True))
        grad_q[:, :, start:end] = torch.matmul(grad_scores, kb) * SCALE
        grad_k[:, :, :end] += torch.matmul(grad_scores.transpose(-1, -2), qb) * SCALE
    grad_k = grad_k.view(batch, NUM_KV_HEADS, groups, seq, HEAD_DIM).sum(dim=2)
    grad_v = grad_v.view(batch, NUM_KV_HEADS, groups, seq, HEAD_DIM).sum(dim=2)
    return (grad_q.transpose(1, 2).to(q.dtype), grad_k.transpose(1, 2).to(k.dtype),
            grad_v.transpose(1, 2).to(v.dtype))
