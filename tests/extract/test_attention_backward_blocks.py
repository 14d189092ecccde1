"""The plain causal attention backward references go over query blocks: same numbers as the one-shot
[batch, heads, seq, seq] formula, and no buffer of that size (64 heads x 8192 tokens would be 17 GB each)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "reference_impls" / "hf"
PLAIN = sorted(p for p in REFERENCES.glob("*_attention_prefill_backward_*.py")
               if "_sw" not in p.stem and "sinks" not in p.stem and not p.stem.endswith(".baseline"))


def _load(path: Path) -> dict:
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


def _one_shot(ns: dict, q, k, v, grad_output):
    """The former reference: every score of every head at once."""
    heads, kv_heads, head_dim, scale = ns["NUM_HEADS"], ns["NUM_KV_HEADS"], ns["HEAD_DIM"], ns["SCALE"]
    batch, seq = q.shape[0], q.shape[1]
    groups = heads // kv_heads
    qf, kf, vf, go = (t.transpose(1, 2).float() for t in (q, k, v, grad_output))
    kf = kf.repeat_interleave(groups, dim=1)
    vf = vf.repeat_interleave(groups, dim=1)
    scores = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    causal = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    out = torch.matmul(probs, vf)
    grad_v = torch.matmul(probs.transpose(-1, -2), go)
    grad_probs = torch.matmul(go, vf.transpose(-1, -2))
    grad_scores = probs * (grad_probs - (go * out).sum(dim=-1, keepdim=True))
    grad_q = torch.matmul(grad_scores, kf) * scale
    grad_k = torch.matmul(grad_scores.transpose(-1, -2), qf) * scale
    grad_k = grad_k.view(batch, kv_heads, groups, seq, head_dim).sum(dim=2)
    grad_v = grad_v.view(batch, kv_heads, groups, seq, head_dim).sum(dim=2)
    return grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2)


def _inputs(ns: dict, batch: int, seq: int, device="cpu", dtype=torch.float32):
    q_shape = (batch, seq, ns["NUM_HEADS"], ns["HEAD_DIM"])
    kv_shape = (batch, seq, ns["NUM_KV_HEADS"], ns["HEAD_DIM"])
    return [torch.randn(s, device=device, dtype=dtype) for s in (q_shape, kv_shape, kv_shape, q_shape)]


class _LargestOutput(TorchDispatchMode):
    """Records the element count of the largest tensor any operator returns, and of the largest score-like one
    (4-d, no head_dim among its last two dims: scores, probabilities and their gradients)."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.head_dim = head_dim
        self.largest = self.largest_scores = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
                if t.dim() == 4 and self.head_dim not in t.shape[-2:]:
                    self.largest_scores = max(self.largest_scores, t.numel())
        return result


def test_plain_backward_references_are_found():
    assert len(PLAIN) >= 10
    assert all("SCORE_BLOCK_ELEMENTS" in p.read_text() for p in PLAIN)


@pytest.mark.parametrize("path", PLAIN, ids=[p.stem for p in PLAIN])
@pytest.mark.parametrize(("batch", "seq", "rows"), [(2, 9, 1), (1, 23, 4), (2, 17, 17), (1, 16, 5)])
def test_blocked_reference_equals_one_shot_formula(path, batch, seq, rows):
    ns = _load(path)
    if ns["NUM_HEADS"] * ns["HEAD_DIM"] > 4096:
        seq = min(seq, 12)
    ns["SCORE_BLOCK_ELEMENTS"] = batch * ns["NUM_HEADS"] * seq * rows  # blocks of `rows` queries, last one ragged
    torch.manual_seed(0)
    inputs = _inputs(ns, batch, seq)
    got, want = ns["run"](*inputs), _one_shot(ns, *inputs)
    for name, g, w in zip(("grad_q", "grad_k", "grad_v"), got, want):
        assert g.shape == w.shape and g.dtype == torch.float32
        assert (g - w).abs().max().item() <= 1e-5, (name, (g - w).abs().max().item())


def test_no_full_score_buffer_at_64_heads_8192_tokens():
    """At the shape that used to need 17 GB per buffer, the largest tensor is one query block's scores."""
    path = REFERENCES / "gqa_attention_prefill_backward_h64_kv8_d128.py"
    ns = _load(path)
    batch, seq = 1, 8192
    inputs = _inputs(ns, batch, seq, device="meta", dtype=torch.bfloat16)
    with _LargestOutput(ns["HEAD_DIM"]) as mode:
        grads = ns["run"](*inputs)
    assert [g.shape for g in grads] == [t.shape for t in inputs[:3]]
    full = batch * ns["NUM_HEADS"] * seq * seq
    assert 0 < mode.largest_scores <= ns["SCORE_BLOCK_ELEMENTS"] < full // 16, (mode.largest_scores, full)
    assert mode.largest <= max(ns["SCORE_BLOCK_ELEMENTS"], batch * ns["NUM_HEADS"] * seq * ns["HEAD_DIM"])


def test_no_full_score_buffer_on_cpu():
    """Same bound measured on real CPU tensors, with blocks small enough that chunking applies."""
    ns = _load(REFERENCES / "gqa_attention_prefill_backward_h16_kv8_d128.py")
    batch, seq = 2, 200
    ns["SCORE_BLOCK_ELEMENTS"] = batch * ns["NUM_HEADS"] * seq * 8
    inputs = _inputs(ns, batch, seq)
    with _LargestOutput(ns["HEAD_DIM"]) as mode:
        ns["run"](*inputs)
    full = batch * ns["NUM_HEADS"] * seq * seq
    assert 0 < mode.largest_scores <= ns["SCORE_BLOCK_ELEMENTS"] < full
    assert mode.largest < full
