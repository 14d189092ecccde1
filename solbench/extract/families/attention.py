"""Multi-head attention (MHA / GQA / MQA): the core kernel and the whole block, prefill and decode.

Features are read from the traced module (head counts from projection shapes, the scale, the sliding
window, learned sinks, QK-norm, the RoPE table width) and become explicit parameters of the reference.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from dataclasses import dataclass

import torch
from torch import nn

from solbench.extract.draft import Arg, Check, Draft, fmt_float, name_float
from solbench.extract.families.norms import WEIGHT_INIT, NormInfo, norm_info
from solbench.spec.errors import SpecError


@dataclass(frozen=True)
class AttentionInfo:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    window: int | None
    sinks: bool
    causal: bool
    fused_qkv: bool
    qkv_bias: bool
    o_bias: bool
    qk_norm: NormInfo | None
    rope: str | None  # "full" (cos/sin as wide as head_dim), "half" (one angle per pair), None
    eager: bool  # the model runs eager attention (its masks are additive)

    @property
    def kind(self) -> str:
        if self.kv_heads == self.heads:
            return "mha"
        return "mqa" if self.kv_heads == 1 else "gqa"

    def core_suffix(self) -> str:
        parts = []
        if self.window:
            parts.append(f"sw{self.window}")
        if self.sinks:
            parts.append("sinks")
        if abs(self.scale - self.head_dim ** -0.5) > 1e-12:
            parts.append(f"scale{name_float(self.scale)}")
        return "".join("_" + p for p in parts)

    def rope_dim(self) -> int:
        return self.head_dim // 2 if self.rope == "half" else self.head_dim


def is_attention(module: nn.Module) -> bool:
    return hasattr(module, "o_proj") and (hasattr(module, "q_proj") or hasattr(module, "qkv_proj"))


def attention_info(module: nn.Module, hf_cfg, layer_type: str | None) -> AttentionInfo:
    head_dim = getattr(module, "head_dim", None) or hf_cfg.hidden_size // hf_cfg.num_attention_heads
    fused = hasattr(module, "qkv_proj")
    if fused:
        hidden = module.qkv_proj.in_features
        heads = hf_cfg.num_attention_heads
        kv_heads = (module.qkv_proj.out_features // head_dim - heads) // 2
        qkv_bias = module.qkv_proj.bias is not None
    else:
        hidden = module.q_proj.in_features
        heads = module.q_proj.out_features // head_dim
        kv_heads = module.k_proj.out_features // head_dim
        qkv_bias = module.q_proj.bias is not None
    window = getattr(module, "sliding_window", None)
    if not isinstance(window, int) or (layer_type is not None and layer_type != "sliding_attention"):
        window = None
    qk_norm = norm_info(module.q_norm) if getattr(module, "q_norm", None) is not None else None
    takes_rope = "position_embeddings" in inspect.signature(module.forward).parameters
    rope = _rope_style(module, head_dim) if takes_rope else None
    partial = getattr(hf_cfg, "rope_parameters", None) or {}
    if isinstance(partial, dict) and partial.get("partial_rotary_factor", 1.0) != 1.0:
        raise SpecError("partial rotary embeddings are not supported yet")
    return AttentionInfo(
        hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, scale=float(module.scaling),
        window=window, sinks=hasattr(module, "sinks"), causal=bool(getattr(module, "is_causal", True)),
        fused_qkv=fused, qkv_bias=qkv_bias, o_bias=module.o_proj.bias is not None, qk_norm=qk_norm, rope=rope,
        eager=module.config._attn_implementation == "eager")


def _rope_style(module: nn.Module, head_dim: int) -> str:
    """Which cos/sin width the module's own rotary helper accepts (probed on CPU)."""
    apply = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb", None)
    if apply is None:
        raise SpecError(f"{type(module).__name__}: cannot find its apply_rotary_pos_emb")
    q = torch.randn(1, 2, 3, head_dim)
    # full first: some helpers (Phi-3) accept a narrower table as partial rotary, which is not "half"
    for style, width in (("full", head_dim), ("half", head_dim // 2)):
        try:
            out, _ = apply(q, q, torch.randn(1, 3, width), torch.randn(1, 3, width))
        except RuntimeError:
            continue
        if out.shape == q.shape:
            return style
    raise SpecError(f"{type(module).__name__}: unknown RoPE layout")


# -- reference source pieces ------------------------------------------------------------------------

def constants(info: AttentionInfo, block: bool) -> str:
    lines = []
    if block:
        lines.append(f"HIDDEN_SIZE = {info.hidden}")
    lines += [f"NUM_HEADS = {info.heads}", f"NUM_KV_HEADS = {info.kv_heads}", f"HEAD_DIM = {info.head_dim}",
              f"SCALE = {info.scale!r}"]
    if info.window:
        lines.append(f"SLIDING_WINDOW = {info.window}")
    return "\n".join(lines)


def attention_helper(info: AttentionInfo) -> str:
    sinks = ", sinks" if info.sinks else ""
    doc = ('    """Scaled-dot-product attention. q: [batch, heads, q_len, head_dim], k/v: [batch, kv_heads, '
           'kv_len, head_dim].\n\n    Queries are the last q_len positions of the kv_len keys')
    if not info.causal:
        return ("def attention(q, k, v):\n"
                '    """Bidirectional attention. q: [batch, heads, len, head_dim], k/v: [batch, kv_heads, len, '
                'head_dim]."""\n'
                "    return F.scaled_dot_product_attention(q, k, v, scale=SCALE, enable_gqa=True)")
    if not info.window and not info.sinks:
        return (f"def attention(q, k, v):\n{doc}; a single query (decode) sees the whole cache.\"\"\"\n"
                f"    return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=SCALE, "
                f"enable_gqa=True)")
    window_doc = ", and only the last SLIDING_WINDOW of them (itself included)" if info.window else ""
    sink_doc = "; a learned per-head sink logit takes probability mass but has no value" if info.sinks else ""
    lines = [f"def attention(q, k, v{sinks}):",
             f'{doc}{window_doc}{sink_doc}."""',
             "    q_len, kv_len = q.shape[2], k.shape[2]",
             "    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]",
             "    k_pos = torch.arange(kv_len, device=q.device)[None, :]",
             "    allowed = (k_pos <= q_pos) & (q_pos - k_pos < SLIDING_WINDOW)" if info.window
             else "    allowed = k_pos <= q_pos",
             "    groups = q.shape[1] // k.shape[1]",
             "    k = k.repeat_interleave(groups, dim=1)",
             "    v = v.repeat_interleave(groups, dim=1)"]
    if not info.sinks:
        lines.append("    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=SCALE)")
    else:
        lines += ["    scores = torch.matmul(q, k.transpose(2, 3)) * SCALE",
                  '    scores = scores.masked_fill(~allowed, float("-inf"))',
                  "    sink = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q_len, 1).to(scores.dtype)",
                  "    logits = torch.cat([scores, sink], dim=-1)",
                  "    logits = logits - logits.max(dim=-1, keepdim=True).values",
                  "    probs = torch.softmax(logits, dim=-1)[..., :-1]",
                  "    return torch.matmul(probs.to(v.dtype), v)"]
    return "\n".join(lines)


ROPE_HELPERS = {
    "full": '''def apply_rope(x, cos, sin):
    """Rotate-half RoPE. x: [batch, heads, seq, head_dim]; cos/sin: [batch, seq, head_dim]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin''',
    "half": '''def apply_rope(x, cos, sin):
    """RoPE on the two halves of head_dim. x: [batch, heads, seq, head_dim]; cos/sin: [batch, seq, head_dim // 2]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)''',
}


def _sinks_arg(info: AttentionInfo, dtype: str) -> list[Arg]:
    return [Arg("sinks", ("num_heads",), dtype, "Learned per-head sink logits")] if info.sinks else []


def _mask_for(info: AttentionInfo, q_len: int, kv_len: int, dtype):
    """The mask transformers would pass for this attention (None where it relies on is_causal)."""
    if not info.causal:
        return None
    if not info.window and not info.eager:
        return None
    q_pos = torch.arange(kv_len - q_len, kv_len)[:, None]
    k_pos = torch.arange(kv_len)[None, :]
    allowed = k_pos <= q_pos
    if info.window:
        allowed = allowed & (q_pos - k_pos < info.window)
    allowed = allowed[None, None]
    if info.eager:
        return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return allowed


def _interface(module):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    impl = module.config._attn_implementation
    fallback = sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS.get_interface(impl, fallback)


# -- core attention ---------------------------------------------------------------------------------

def core_drafts(info: AttentionInfo, module_ref: str, dtype: str = "bfloat16",
                fixed_seq: int | None = None) -> list[Draft]:
    """The attention kernel alone, on already-projected (and rotated) q, k, v."""
    base = f"{info.kind}_attention_{{phase}}_h{info.heads}_kv{info.kv_heads}_d{info.head_dim}{info.core_suffix()}"
    heads_axes = {"num_heads": ("const", info.heads, "Query heads"),
                  "num_kv_heads": ("const", info.kv_heads, "Key/value heads"),
                  "head_dim": ("const", info.head_dim, "Head dimension")}
    sinks = ", sinks" if info.sinks else ""
    what = {"mha": "Multi-head", "gqa": "Grouped-query", "mqa": "Multi-query"}[info.kind]
    extras = []
    if info.window:
        extras.append(f"a sliding window of {info.window}")
    if info.sinks:
        extras.append("learned attention sinks")
    extra = (" with " + " and ".join(extras)) if extras else ""
    params = {"sinks": "sinks"} if info.sinks else {}
    drafts = []

    def prefill_call(m, inp):
        q, k, v = (inp[n].transpose(1, 2) for n in ("q", "k", "v"))
        mask = _mask_for(info, q.shape[2], k.shape[2], q.dtype)
        out, _ = _interface(m)(m, q, k, v, mask, dropout=0.0, scaling=m.scaling, sliding_window=info.window)
        return {"output": out}

    prefill_code = f'''{constants(info, block=False)}


{attention_helper(info)}


@torch.no_grad()
def run(q, k, v{sinks}):
    """q: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim] -> [batch, seq, heads, head_dim]."""
    out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2){sinks})
    return out.transpose(1, 2).contiguous()
'''
    seq_axes = {"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence")}
    if fixed_seq:
        seq_axes = {"batch_size": ("var", "Images"), "seq_len": ("const", fixed_seq, "Tokens per image")}
    small_prefill = {"batch_size": 1 if info.window else 2, "seq_len": (info.window + 9) if info.window and
                     info.window <= 1024 else 9}
    causal_word = "causal " if info.causal else "bidirectional "
    drafts.append(Draft(
        name=base.format(phase="bidirectional" if not info.causal else "prefill"), op_type="attention",
        description=f"{what} {causal_word}attention{extra} over full sequences (prefill): {info.heads} query "
                    f"heads, {info.kv_heads} key/value heads, head_dim {info.head_dim}, scale {fmt_float(info.scale)}.",
        axes=seq_axes | heads_axes,
        inputs=[Arg("q", ("batch_size", "seq_len", "num_heads", "head_dim"), dtype, "Queries (after RoPE)"),
                Arg("k", ("batch_size", "seq_len", "num_kv_heads", "head_dim"), dtype, "Keys (after RoPE)"),
                Arg("v", ("batch_size", "seq_len", "num_kv_heads", "head_dim"), dtype, "Values"),
                *_sinks_arg(info, dtype)],
        outputs=[Arg("output", ("batch_size", "seq_len", "num_heads", "head_dim"), dtype, "Attention output")],
        code=prefill_code, shapes="images" if fixed_seq else "prefill",
        check=Check(module_ref, params, prefill_call,
                    {"batch_size": 2} if fixed_seq else small_prefill),
    ))
    if not info.causal:
        return drafts

    def decode_call(m, inp):
        q = inp["q"][:, :, None, :]
        k, v = inp["k_cache"].transpose(1, 2), inp["v_cache"].transpose(1, 2)
        mask = _mask_for(info, 1, k.shape[2], q.dtype) if info.window or info.eager else None
        out, _ = _interface(m)(m, q, k, v, mask, dropout=0.0, scaling=m.scaling, sliding_window=info.window)
        return {"output": out[:, 0]}

    decode_code = f'''{constants(info, block=False)}


{attention_helper(info)}


@torch.no_grad()
def run(q, k_cache, v_cache{sinks}):
    """One query token per sequence against its KV cache (which already holds the token's own key/value).

    q: [batch, heads, head_dim]; k_cache, v_cache: [batch, kv_len, kv_heads, head_dim] -> [batch, heads, head_dim].
    """
    out = attention(q[:, :, None, :], k_cache.transpose(1, 2), v_cache.transpose(1, 2){sinks})
    return out[:, :, 0, :]
'''
    small_decode = {"batch_size": 2, "kv_len": (info.window + 7) if info.window and info.window <= 1024 else 13}
    drafts.append(Draft(
        name=base.format(phase="decode"), op_type="attention",
        description=f"{what} attention{extra} for decode: one query token per sequence against a KV cache of "
                    f"kv_len positions; {info.heads} query heads, {info.kv_heads} key/value heads, head_dim "
                    f"{info.head_dim}, scale {fmt_float(info.scale)}.",
        axes={"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions (the new token included)")}
        | heads_axes,
        inputs=[Arg("q", ("batch_size", "num_heads", "head_dim"), dtype, "Query of the new token (after RoPE)"),
                Arg("k_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Key cache"),
                Arg("v_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Value cache"),
                *_sinks_arg(info, dtype)],
        outputs=[Arg("output", ("batch_size", "num_heads", "head_dim"), dtype, "Attention output")],
        code=decode_code, shapes="decode",
        check=Check(module_ref, params, decode_call, small_decode),
    ))
    return drafts


# -- attention block ------------------------------------------------------------------------------

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
        parts.append("qknorm" + style + eps)
    if info.rope is None:
        parts.append("norope")
    elif info.rope == "half":
        parts.append("ropehalf")
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
    else:
        lines += [f"q = F.linear({x}, {p}q_weight{b('q')}).view(batch, seq, NUM_HEADS, HEAD_DIM)",
                  f"k = F.linear({x}, {p}k_weight{b('k')}).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)",
                  f"v = F.linear({x}, {p}v_weight{b('v')}).view(batch, seq, NUM_KV_HEADS, HEAD_DIM)"]
    if info.qk_norm:
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


def block_drafts(info: AttentionInfo, module_ref: str, dtype: str = "bfloat16",
                 fixed_seq: int | None = None) -> list[Draft]:
    weights, params = block_inputs(info, dtype)
    rope_args = []
    if info.rope:
        init = "cos_half" if info.rope == "half" else "cos"
        rope_args = [Arg("cos", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE cosines", init=init),
                     Arg("sin", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE sines", init=init.replace("cos", "sin"))]
    const_axes = {"hidden_size": ("const", info.hidden, "Model width"),
                  "num_heads": ("const", info.heads, "Query heads"),
                  "num_kv_heads": ("const", info.kv_heads, "Key/value heads"),
                  "head_dim": ("const", info.head_dim, "Head dimension")}
    if info.rope:
        const_axes["rope_dim"] = ("const", info.rope_dim(), "Width of the cos/sin tables")
    names = ["hidden_states"] + [a.name for a in weights] + [a.name for a in rope_args]
    helper_src = "\n\n\n".join(helpers(info))
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
    drafts = []

    def prefill_call(m, inp):
        x = inp["hidden_states"]
        kwargs = {"position_embeddings": (inp["cos"], inp["sin"])} if info.rope else {}
        mask = _mask_for(info, x.shape[1], x.shape[1], x.dtype)
        out = m(x, attention_mask=mask, **kwargs)
        return {"output": out[0] if isinstance(out, tuple) else out}

    code = f'''{constants(info, block=True)}


{helper_src}


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
    drafts.append(Draft(
        name=block_name(info, phase), op_type="attention_block",
        description=f"{body}; {'causal prefill over' if info.causal else 'bidirectional over'} full sequences.",
        axes=seq_axes | const_axes,
        inputs=[Arg("hidden_states", ("batch_size", "seq_len", "hidden_size"), dtype, "Input activations"),
                *weights, *rope_args],
        outputs=[Arg("output", ("batch_size", "seq_len", "hidden_size"), dtype, "Block output")],
        code=code, shapes="images" if fixed_seq else "prefill",
        check=Check(module_ref, params, prefill_call,
                    {"batch_size": 2} if fixed_seq else {"batch_size": 2, "seq_len": 9}),
    ))
    if not info.causal:
        return drafts

    def decode_call(m, inp):
        from transformers import DynamicCache

        x = inp["hidden_states"][:, None, :]
        cache = DynamicCache()
        layer_idx = m.layer_idx
        cache.update(inp["k_cache"].transpose(1, 2), inp["v_cache"].transpose(1, 2), layer_idx)
        kv_len = inp["k_cache"].shape[1] + 1
        mask = _mask_for(info, 1, kv_len, x.dtype)
        kwargs = {"position_embeddings": (inp["cos"][:, None], inp["sin"][:, None])} if info.rope else {}
        out = m(x, attention_mask=mask, past_key_values=cache, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        layer = cache.layers[layer_idx]
        return {"output": out[:, 0], "k_new": layer.keys[:, :, -1], "v_new": layer.values[:, :, -1]}

    dec_rope = [Arg("cos", ("batch_size", "rope_dim"), dtype, "RoPE cosines at each new token's position",
                    init=rope_args[0].init),
                Arg("sin", ("batch_size", "rope_dim"), dtype, "RoPE sines at each new token's position",
                    init=rope_args[1].init)] if info.rope else []
    dec_names = ["hidden_states"] + [a.name for a in weights] + [a.name for a in dec_rope] + ["k_cache", "v_cache"]
    rope_unsqueeze = "    cos, sin = cos[:, None], sin[:, None]\n" if info.rope else ""
    dec_code = f'''{constants(info, block=True)}


{helper_src}


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
    drafts.append(Draft(
        name=block_name(info, "decode"), op_type="attention_block",
        description=f"{body}; decode: one new token per sequence attends to a KV cache of kv_len previous "
                    f"positions plus itself.",
        axes={"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions before the new token")}
        | const_axes,
        inputs=[Arg("hidden_states", ("batch_size", "hidden_size"), dtype, "New token activations"), *weights,
                *dec_rope,
                Arg("k_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Key cache (after RoPE)"),
                Arg("v_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Value cache")],
        outputs=[Arg("output", ("batch_size", "hidden_size"), dtype, "Block output"),
                 Arg("k_new", ("batch_size", "num_kv_heads", "head_dim"), dtype, "New key to append"),
                 Arg("v_new", ("batch_size", "num_kv_heads", "head_dim"), dtype, "New value to append")],
        code=dec_code, shapes="decode",
        check=Check(module_ref, params, decode_call,
                    {"batch_size": 2, "kv_len": (info.window + 4) if info.window and info.window <= 1024 else 11}),
    ))
    return drafts


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
        mask = _mask_for(info, q.shape[2], k.shape[2], q.dtype)
        extra = [m.sinks] if info.sinks else []
        with torch.enable_grad():
            for p in extra:
                p.requires_grad_(True)
            out, _ = _interface(m)(m, q, k, v, mask, dropout=0.0, scaling=m.scaling, sliding_window=info.window)
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
                Arg("v", shape_kv, dtype, "Values"), *_sinks_arg(info, dtype),
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
