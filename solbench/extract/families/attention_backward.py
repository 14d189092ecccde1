"""Backward of causal attention: dq, dk, dv (and the sinks' gradient) from q, k, v and the output gradient."""

from __future__ import annotations

import textwrap

import torch

from solbench.extract.draft import Arg, Check, Draft
from solbench.extract.families.attention import (
    AttentionInfo,
    attention_interface,
    constants,
    mask_for,
    sinks_arg,
)


def core_backward_draft(info: AttentionInfo, module_ref: str, dtype: str = "bfloat16") -> Draft | None:
    """Backward of causal attention: dq, dk, dv (and d sinks) from q, k, v and the output gradient."""
    if not info.causal:
        return None
    if not info.window and not info.sinks:
        code = _BACKWARD_PLAIN.format(constants=constants(info, block=False))
    else:
        code = _backward_windowed_or_sinks(info)

    def call(m, inp):
        q, k, v = (inp[n].detach().transpose(1, 2).clone().requires_grad_(True) for n in ("q", "k", "v"))
        mask = mask_for(info, q.shape[2], k.shape[2], q.dtype)
        extra = [m.sinks] if info.sinks else []
        with torch.enable_grad():
            for p in extra:
                p.requires_grad_(True)
            out, _ = attention_interface(m)(m, q, k, v, mask, dropout=0.0, scaling=m.scaling, sliding_window=info.window)
            grads = torch.autograd.grad(out, [q, k, v, *extra], inp["grad_output"])
        named = {n: g.transpose(1, 2) for n, g in zip(("grad_q", "grad_k", "grad_v"), grads)}
        if info.sinks:
            named["grad_sinks"] = grads[3]
        return named

    shape_q = ("batch_size", "seq_len", "num_heads", "head_dim")
    shape_kv = ("batch_size", "seq_len", "num_kv_heads", "head_dim")
    extras = []
    if info.window:
        extras.append(f"a sliding window of {info.window}")
    if info.sinks:
        extras.append("learned sinks (their gradient is returned too)")
    extra = (" with " + " and ".join(extras)) if extras else ""
    small = {"batch_size": 2, "seq_len": 9}
    if info.window and info.window <= 1024:
        small = {"batch_size": 1, "seq_len": info.window + 9}  # longer than the window
    return Draft(
        name=f"{info.kind}_attention_prefill_backward_h{info.heads}_kv{info.kv_heads}_d{info.head_dim}"
             f"{info.core_suffix()}",
        op_type="attention_backward",
        description=f"Backward of causal {info.kind.upper()} attention{extra} ({info.heads} query heads, "
                    f"{info.kv_heads} key/value heads, head_dim {info.head_dim}): dq, dk, dv with the softmax "
                    f"recomputed.",
        axes={"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence"),
              "num_heads": ("const", info.heads, "Query heads"),
              "num_kv_heads": ("const", info.kv_heads, "Key/value heads"),
              "head_dim": ("const", info.head_dim, "Head dimension")},
        inputs=[Arg("q", shape_q, dtype, "Queries"), Arg("k", shape_kv, dtype, "Keys"),
                Arg("v", shape_kv, dtype, "Values"), *sinks_arg(info, dtype),
                Arg("grad_output", shape_q, dtype, "Gradient of the output")],
        outputs=[Arg("grad_q", shape_q, dtype, "Gradient of q"), Arg("grad_k", shape_kv, dtype, "Gradient of k"),
                 Arg("grad_v", shape_kv, dtype, "Gradient of v"),
                 *([Arg("grad_sinks", ("num_heads",), dtype, "Gradient of the sink logits")] if info.sinks else [])],
        code=code, shapes="train", tolerance_scale=2.0,
        check=Check(module_ref, {"sinks": "sinks"} if info.sinks else {}, call, small),
    )


_BACKWARD_PLAIN = '''{constants}
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
'''


def _backward_windowed_or_sinks(info: AttentionInfo) -> str:
    """The backward reference with a sliding window and/or sinks; [batch, heads, seq, seq] float32 buffers set
    the memory peak, so they are updated in place and dropped as soon as they are used."""
    sinks = ", sinks" if info.sinks else ""
    sees = "the last SLIDING_WINDOW positions, itself included" if info.window else "every earlier position"
    doc = (f"Recomputes the causal softmax in float32 (each query sees {sees}"
           + ("; a per-head sink logit joins every softmax but carries no value" if info.sinks else "")
           + ") and returns dq, dk, dv in the input layouts; gradients of query heads that share a key/value head "
             "are summed onto it." + (" The sink gradient sums over batch and positions." if info.sinks else ""))
    lines = [constants(info, block=False), "", "", "@torch.no_grad()",
             f"def run(q, k, v{sinks}, grad_output):",
             '    """q, grad_output: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim]'
             + ("; sinks: [heads]." if info.sinks else "."), "",
             textwrap.fill(doc, 110, initial_indent="    ", subsequent_indent="    ") + '"""',
             "    batch, seq = q.shape[0], q.shape[1]",
             "    groups = NUM_HEADS // NUM_KV_HEADS",
             "    qf, kf, vf, go = (t.transpose(1, 2).float() for t in (q, k, v, grad_output))",
             "    kf = kf.repeat_interleave(groups, dim=1)",
             "    vf = vf.repeat_interleave(groups, dim=1)",
             "    pos = torch.arange(seq, device=q.device)",
             "    allowed = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < SLIDING_WINDOW)"
             if info.window else "    allowed = pos[None, :] <= pos[:, None]",
             "    scores = torch.matmul(qf, kf.transpose(-1, -2)).mul_(SCALE)",
             '    scores.masked_fill_(~allowed, float("-inf"))']
    if info.sinks:
        lines += ["    sink = sinks.float().reshape(1, -1, 1, 1).expand(batch, -1, seq, 1)",
                  "    probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)",
                  "    del scores",
                  "    sink_probs, probs = probs[..., -1], probs[..., :-1]"]
    else:
        lines += ["    probs = torch.softmax(scores, dim=-1)", "    del scores"]
    lines += ["    out = torch.matmul(probs, vf)",
              "    grad_v = torch.matmul(probs.transpose(-1, -2), go)",
              "    delta = (go * out).sum(dim=-1, keepdim=True)",
              "    grad_scores = torch.matmul(go, vf.transpose(-1, -2)).sub_(delta).mul_(probs)  # dsoftmax",
              "    del probs",
              "    grad_q = torch.matmul(grad_scores, kf) * SCALE",
              "    grad_k = torch.matmul(grad_scores.transpose(-1, -2), qf) * SCALE",
              "    grad_k = grad_k.view(batch, NUM_KV_HEADS, groups, seq, HEAD_DIM).sum(dim=2)",
              "    grad_v = grad_v.view(batch, NUM_KV_HEADS, groups, seq, HEAD_DIM).sum(dim=2)"]
    ret = ("    return (grad_q.transpose(1, 2).to(q.dtype), grad_k.transpose(1, 2).to(k.dtype),\n"
           "            grad_v.transpose(1, 2).to(v.dtype)")
    if info.sinks:
        lines.append("    grad_sinks = -(sink_probs * delta[..., 0]).sum(dim=(0, 2))  # the sink's value is zero")
        ret += ", grad_sinks.to(sinks.dtype)"
    lines.append(ret + ")")
    return "\n".join(lines) + "\n"
