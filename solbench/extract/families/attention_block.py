"""The attention block (projections, QK-norm, RoPE, attention, output projection), prefill and decode.

The block's reference is the core attention of `attention` with the module's own projections around it,
read from the same `AttentionInfo`.
"""

from __future__ import annotations

from dataclasses import dataclass

from solbench.extract.draft import Arg, Check, Draft, name_float
from solbench.extract.families.attention import (
    ROPE_HELPERS,
    AttentionInfo,
    attention_helper,
    constants,
    mask_for,
)
from solbench.extract.families.norms import WEIGHT_INIT


def block_name(info: AttentionInfo, phase: str) -> str:
    parts = [f"attention_block_{phase}_hs{info.hidden}_h{info.heads}_kv{info.kv_heads}_d{info.head_dim}"]
    if info.fused_qkv:
        parts.append("qkvfused")
    if info.qkv_bias:
        parts.append("qkvbias")
    if info.o_bias:
        parts.append("obias")
    if info.qk_norm:
        style = {"rms": "", "rms_fp32mul": "fp32mul", "rms_oneplus": "oneplus"}[info.qk_norm.style]
        eps = "" if info.qk_norm.eps == 1e-6 else f"eps{name_float(info.qk_norm.eps)}"
        parts.append("qknorm" + ("flat" if info.qk_norm_flat else "") + style + eps)
    if info.rope is None:
        parts.append("norope")
    elif info.rope == "half":
        parts.append("ropehalf")
    elif info.rope == "partial":
        parts.append(f"rope{info.rotary_dim}")
    suffix = info.core_suffix().lstrip("_")
    if suffix:
        parts.append(suffix)
    return "_".join(p for p in parts if p)


def block_inputs(info: AttentionInfo, dtype: str, prefix: str = "") -> tuple[list[Arg], dict[str, str]]:
    """Weights of the block (reference input -> parameter path in the attention module)."""
    p = prefix
    q_out, kv_out = info.heads * info.head_dim, info.kv_heads * info.head_dim
    args: list[Arg] = []
    params: dict[str, str] = {}
    if info.fused_qkv:
        args.append(Arg(f"{p}qkv_weight", (str(q_out + 2 * kv_out), "hidden_size"), dtype,
                        "Fused query/key/value projection (rows: q, then k, then v)", init="weight",
                        fan_in="hidden_size"))
        params[f"{p}qkv_weight"] = "qkv_proj.weight"
        if info.qkv_bias:
            args.append(Arg(f"{p}qkv_bias", (str(q_out + 2 * kv_out),), dtype, "Fused q/k/v bias", init="bias"))
            params[f"{p}qkv_bias"] = "qkv_proj.bias"
    else:
        for n, out in (("q", q_out), ("k", kv_out), ("v", kv_out)):
            args.append(Arg(f"{p}{n}_weight", (str(out), "hidden_size"), dtype, f"{n.upper()} projection",
                            init="weight", fan_in="hidden_size"))
            params[f"{p}{n}_weight"] = f"{n}_proj.weight"
            if info.qkv_bias:
                args.append(Arg(f"{p}{n}_bias", (str(out),), dtype, f"{n.upper()} projection bias", init="bias"))
                params[f"{p}{n}_bias"] = f"{n}_proj.bias"
    args.append(Arg(f"{p}o_weight", ("hidden_size", str(q_out)), dtype, "Output projection", init="weight",
                    fan_in=str(q_out)))
    params[f"{p}o_weight"] = "o_proj.weight"
    if info.o_bias:
        args.append(Arg(f"{p}o_bias", ("hidden_size",), dtype, "Output projection bias", init="bias"))
        params[f"{p}o_bias"] = "o_proj.bias"
    if info.qk_norm:
        init = WEIGHT_INIT[info.qk_norm.style]
        if info.qk_norm_flat:
            args += [Arg(f"{p}q_norm_weight", (str(q_out),), dtype, "Query norm across all heads", init=init),
                     Arg(f"{p}k_norm_weight", (str(kv_out),), dtype, "Key norm across all heads", init=init)]
        else:
            args += [Arg(f"{p}q_norm_weight", ("head_dim",), dtype, "Per-head query norm", init=init),
                     Arg(f"{p}k_norm_weight", ("head_dim",), dtype, "Per-head key norm", init=init)]
        params[f"{p}q_norm_weight"] = "q_norm.weight"
        params[f"{p}k_norm_weight"] = "k_norm.weight"
    if info.sinks:
        args.append(Arg(f"{p}sinks", ("num_heads",), dtype, "Learned per-head sink logits"))
        params[f"{p}sinks"] = "sinks"
    return args, params


def projection_source(info: AttentionInfo, x: str, p: str = "", indent: str = "    ") -> str:
    """Source computing q, k, v as [batch, heads, seq, head_dim] from `x` [batch, seq, hidden]."""
    def b(n):
        return (f", {p}{n}_bias" if info.qkv_bias else "")
    lines = [f"batch, seq = {x}.shape[0], {x}.shape[1]"]
    if info.fused_qkv:
        bias = f", {p}qkv_bias" if info.qkv_bias else ""
        lines += [f"qkv = F.linear({x}, {p}qkv_weight{bias})",
                  "q_size, kv_size = NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM",
                  "q = qkv[..., :q_size].view(batch, seq, NUM_HEADS, HEAD_DIM)",
                  "k = qkv[..., q_size:q_size + kv_size].view(batch, seq, NUM_KV_HEADS, HEAD_DIM)",
                  "v = qkv[..., q_size + kv_size:].view(batch, seq, NUM_KV_HEADS, HEAD_DIM)"]
    elif info.qk_norm_flat:  # the norms see each token's whole projection, before the split into heads
        q_flat = info.qk_norm.call(f"F.linear({x}, {p}q_weight{b('q')})", p + "q_norm_weight")
        k_flat = info.qk_norm.call(f"F.linear({x}, {p}k_weight{b('k')})", p + "k_norm_weight")
        lines += [f"q = {q_flat}.view(batch, seq, NUM_HEADS, HEAD_DIM)",
                  f"k = {k_flat}.view(batch, seq, NUM_KV_HEADS, HEAD_DIM)",
                  f"v = F.linear({x}, {p}v_weight{b('v')}).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)"]
    else:
        lines += [f"q = F.linear({x}, {p}q_weight{b('q')}).view(batch, seq, NUM_HEADS, HEAD_DIM)",
                  f"k = F.linear({x}, {p}k_weight{b('k')}).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)",
                  f"v = F.linear({x}, {p}v_weight{b('v')}).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)"]
    if info.qk_norm and not info.qk_norm_flat:
        lines += [f"q = {info.qk_norm.call('q', p + 'q_norm_weight')}",
                  f"k = {info.qk_norm.call('k', p + 'k_norm_weight')}"]
    lines.append("q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)")
    if info.rope:
        lines.append("q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)")
    return "\n".join(indent + line for line in lines)


def output_source(info: AttentionInfo, out: str, p: str = "", indent: str = "    ") -> str:
    bias = f", {p}o_bias" if info.o_bias else ""
    sinks = f", {p}sinks" if info.sinks else ""
    return (f"{indent}attn = attention(q, k, v{sinks})\n"
            f"{indent}attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * HEAD_DIM)\n"
            f"{indent}{out} = F.linear(attn, {p}o_weight{bias})")


def helpers(info: AttentionInfo) -> list[str]:
    out = []
    if info.qk_norm:
        out.append(info.qk_norm.helper)
    if info.rope:
        out.append(ROPE_HELPERS[info.rope])
    out.append(attention_helper(info))
    return out


@dataclass(frozen=True)
class _Block:
    """What the prefill and decode drafts of one block share."""

    info: AttentionInfo
    module_ref: str
    dtype: str
    weights: list[Arg]
    params: dict[str, str]
    rope_args: list[Arg]
    helper_src: str
    body: str  # the description's common part


def block_drafts(info: AttentionInfo, module_ref: str, dtype: str = "bfloat16",
                 fixed_seq: int | None = None) -> list[Draft]:
    weights, params = block_inputs(info, dtype)
    rope_args = []
    if info.rope:
        init = "cos_half" if info.rope == "half" else "cos"
        rope_args = [Arg("cos", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE cosines", init=init),
                     Arg("sin", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE sines", init=init.replace("cos", "sin"))]
    block = _Block(info, module_ref, dtype, weights, params, rope_args, "\n\n\n".join(helpers(info)),
                   _description(info))
    drafts = [_prefill_draft(block, fixed_seq)]
    if info.causal:
        drafts.append(_decode_draft(block))
    return drafts


def _description(info: AttentionInfo) -> str:
    desc_bits = [f"{info.kind.upper()} attention block (q/k/v projections"]
    if info.qk_norm:
        desc_bits.append(", per-head QK RMSNorm")
    if info.rope:
        desc_bits.append(", RoPE")
    desc_bits.append(", attention, output projection)")
    body = "".join(desc_bits) + f": hidden {info.hidden}, {info.heads} query heads, {info.kv_heads} key/value heads, " \
                                f"head_dim {info.head_dim}"
    if info.window:
        body += f", sliding window {info.window}"
    if info.sinks:
        body += ", learned sinks"
    return body


def _prefill_draft(block: _Block, fixed_seq: int | None) -> Draft:
    """The whole sequence at once: causal prefill, or bidirectional (encoders, vision towers)."""
    info = block.info
    names = ["hidden_states"] + [a.name for a in block.weights] + [a.name for a in block.rope_args]

    def prefill_call(m, inp):
        x = inp["hidden_states"]
        kwargs = {"position_embeddings": (inp["cos"], inp["sin"])} if info.rope else {}
        mask = mask_for(info, x.shape[1], x.shape[1], x.dtype)
        out = m(x, attention_mask=mask, **kwargs)
        return {"output": out[0] if isinstance(out, tuple) else out}

    code = f'''{constants(info, block=True)}


{block.helper_src}


@torch.no_grad()
def run({", ".join(names)}):
    """hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""
{projection_source(info, "hidden_states")}
{output_source(info, "output")}
    return output
'''
    phase = "prefill" if info.causal else "bidirectional"
    seq_axes = {"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence")}
    if fixed_seq:
        seq_axes = {"batch_size": ("var", "Images"), "seq_len": ("const", fixed_seq, "Tokens per image")}
    return Draft(
        name=block_name(info, phase), op_type="attention_block",
        description=f"{block.body}; {'causal prefill over' if info.causal else 'bidirectional over'} full sequences.",
        axes=seq_axes | info.const_axes(),
        inputs=[Arg("hidden_states", ("batch_size", "seq_len", "hidden_size"), block.dtype, "Input activations"),
                *block.weights, *block.rope_args],
        outputs=[Arg("output", ("batch_size", "seq_len", "hidden_size"), block.dtype, "Block output")],
        code=code, shapes="images" if fixed_seq else "prefill",
        check=Check(block.module_ref, block.params, prefill_call,
                    {"batch_size": 2} if fixed_seq else {"batch_size": 2, "seq_len": 9}),
    )


def _decode_draft(block: _Block) -> Draft:
    """One new token per sequence against a KV cache; also returns the new key and value."""
    info, dtype = block.info, block.dtype

    def decode_call(m, inp):
        from transformers import DynamicCache

        x = inp["hidden_states"][:, None, :]
        cache = DynamicCache()
        layer_idx = m.layer_idx
        cache.update(inp["k_cache"].transpose(1, 2), inp["v_cache"].transpose(1, 2), layer_idx)
        kv_len = inp["k_cache"].shape[1] + 1
        mask = mask_for(info, 1, kv_len, x.dtype)
        kwargs = {"position_embeddings": (inp["cos"][:, None], inp["sin"][:, None])} if info.rope else {}
        out = m(x, attention_mask=mask, past_key_values=cache, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        layer = cache.layers[layer_idx]
        return {"output": out[:, 0], "k_new": layer.keys[:, :, -1], "v_new": layer.values[:, :, -1]}

    dec_rope = [Arg("cos", ("batch_size", "rope_dim"), dtype, "RoPE cosines at each new token's position",
                    init=block.rope_args[0].init),
                Arg("sin", ("batch_size", "rope_dim"), dtype, "RoPE sines at each new token's position",
                    init=block.rope_args[1].init)] if info.rope else []
    dec_names = ["hidden_states"] + [a.name for a in block.weights] + [a.name for a in dec_rope] + ["k_cache", "v_cache"]
    rope_unsqueeze = "    cos, sin = cos[:, None], sin[:, None]\n" if info.rope else ""
    dec_code = f'''{constants(info, block=True)}


{block.helper_src}


@torch.no_grad()
def run({", ".join(dec_names)}):
    """One new token per sequence. hidden_states: [batch, hidden]; k_cache/v_cache: [batch, kv_len, kv_heads,
    head_dim] hold the previous positions. Returns the block output [batch, hidden] and the new token's key and
    value [batch, kv_heads, head_dim] (to append to the cache)."""
    x = hidden_states[:, None, :]
{rope_unsqueeze}{projection_source(info, "x")}
    k_new, v_new = k[:, :, 0], v[:, :, 0]
    k = torch.cat((k_cache.transpose(1, 2), k), dim=2)
    v = torch.cat((v_cache.transpose(1, 2), v), dim=2)
{output_source(info, "output")}
    return output[:, 0], k_new, v_new
'''
    return Draft(
        name=block_name(info, "decode"), op_type="attention_block",
        description=f"{block.body}; decode: one new token per sequence attends to a KV cache of kv_len previous "
                    f"positions plus itself.",
        axes={"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions before the new token")}
        | info.const_axes(),
        inputs=[Arg("hidden_states", ("batch_size", "hidden_size"), dtype, "New token activations"), *block.weights,
                *dec_rope,
                Arg("k_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Key cache (after RoPE)"),
                Arg("v_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Value cache")],
        outputs=[Arg("output", ("batch_size", "hidden_size"), dtype, "Block output"),
                 Arg("k_new", ("batch_size", "num_kv_heads", "head_dim"), dtype, "New key to append"),
                 Arg("v_new", ("batch_size", "num_kv_heads", "head_dim"), dtype, "New value to append")],
        code=dec_code, shapes="decode",
        check=Check(block.module_ref, block.params, decode_call,
                    {"batch_size": 2, "kv_len": (info.window + 4) if info.window and info.window <= 1024 else 11}),
    )
