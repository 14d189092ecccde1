"""Multi-head attention (MHA / GQA / MQA): what a module's attention is, and its core kernel, prefill and
decode. The whole block is in `attention_block`, the core's backward in `attention_backward`.

Features are read from the traced module (head counts from projection shapes, the scale, the sliding
window, learned sinks, QK-norm, the RoPE table width) and become explicit parameters of the reference.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

import torch
from torch import nn

from solbench.extract.draft import Arg, Check, Draft, fmt_float, name_float
from solbench.extract.families.norms import NormInfo, norm_info
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
    rope: str | None  # "full" (cos/sin as wide as head_dim), "half" (one angle per pair), "partial", None
    eager: bool  # the model runs eager attention (its masks are additive)
    rotary_dim: int = 0  # "partial": rotate-half RoPE on the first rotary_dim dims of each head (GLM, MiMo)
    qk_norm_flat: bool = False  # q/k norms span all heads (MiniMax-M2, OLMo), not each head

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
        if self.rope == "partial":
            return self.rotary_dim
        return self.head_dim // 2 if self.rope == "half" else self.head_dim

    def const_axes(self) -> dict[str, tuple]:
        """The fixed axes of a block or layer built on this attention (the block's and the layer's alike)."""
        axes = {"hidden_size": ("const", self.hidden, "Model width"),
                "num_heads": ("const", self.heads, "Query heads"),
                "num_kv_heads": ("const", self.kv_heads, "Key/value heads"),
                "head_dim": ("const", self.head_dim, "Head dimension")}
        if self.rope:
            axes["rope_dim"] = ("const", self.rope_dim(), "Width of the cos/sin tables")
        return axes


def is_attention(module: nn.Module) -> bool:
    return hasattr(module, "o_proj") and (hasattr(module, "q_proj") or hasattr(module, "qkv_proj"))


# what the templates read from an attention module: its projections, q/k norms and sink logits
KNOWN_PARAMETERS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "q_norm", "k_norm", "sinks")


def attention_info(module: nn.Module, hf_cfg, layer_type: str | None) -> AttentionInfo:
    unknown = sorted({name.split(".")[0] for name, _ in module.named_parameters()} - set(KNOWN_PARAMETERS))
    if unknown:  # Parakeet's relative-position attention (relative_k_proj, bias_u, bias_v): not a template's
        raise SpecError(f"{type(module).__name__}: parameters the templates do not know ({', '.join(unknown)})")
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
        if module.o_proj.in_features != heads * head_dim:  # Qwen3-Next: q_proj also gives a gate per head
            raise SpecError(f"{type(module).__name__}: q_proj gives {module.q_proj.out_features} features and "
                            f"o_proj takes {module.o_proj.in_features}: an output gate the templates do not know")
    window = getattr(module, "sliding_window", None)
    if not isinstance(window, int) or (layer_type is not None and layer_type != "sliding_attention"):
        window = None
    qk_norm = norm_info(module.q_norm) if getattr(module, "q_norm", None) is not None else None
    flat = qk_norm is not None and qk_norm.size == heads * head_dim != head_dim
    if flat and fused:
        raise SpecError("q/k norms across heads with a fused qkv projection are not supported yet")
    takes_rope = "position_embeddings" in inspect.signature(module.forward).parameters
    factor = partial_rotary_factor(hf_cfg, layer_type)
    rotary_dim = int(head_dim * factor) if factor != 1.0 else 0  # as transformers' RoPE init computes it
    rope = _rope_style(module, head_dim, rotary_dim) if takes_rope else None
    return AttentionInfo(
        hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, scale=float(module.scaling),
        window=window, sinks=hasattr(module, "sinks"), causal=bool(getattr(module, "is_causal", True)),
        fused_qkv=fused, qkv_bias=qkv_bias, o_bias=module.o_proj.bias is not None, qk_norm=qk_norm, rope=rope,
        eager=module.config._attn_implementation == "eager", rotary_dim=rotary_dim if rope == "partial" else 0,
        qk_norm_flat=flat)


def partial_rotary_factor(hf_cfg, layer_type: str | None) -> float:
    """The share of each head that RoPE rotates: from the (per-layer-type) RoPE parameters or the config."""
    params = getattr(hf_cfg, "rope_parameters", None) or {}
    if isinstance(params, dict) and isinstance(params.get(layer_type or ""), dict):
        params = params[layer_type]
    factor = params.get("partial_rotary_factor") if isinstance(params, dict) else None
    if factor is None:
        factor = getattr(hf_cfg, "partial_rotary_factor", None)
    return float(factor) if factor is not None else 1.0


def _rope_style(module: nn.Module, head_dim: int, rotary_dim: int = 0) -> str:
    """Which cos/sin width the module's own rotary helper accepts (probed on CPU)."""
    apply = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb", None)
    if apply is None:
        raise SpecError(f"{type(module).__name__}: cannot find its apply_rotary_pos_emb")
    q = torch.randn(1, 2, 3, head_dim)
    # full first: some helpers (Phi-3) accept a narrower table as partial rotary, which is not "half"
    styles = (("partial", rotary_dim),) if rotary_dim else (("full", head_dim), ("half", head_dim // 2))
    for style, width in styles:
        cos, sin = torch.randn(1, 3, width), torch.randn(1, 3, width)
        try:
            out, _ = apply(q, q, cos, sin)
        except (RuntimeError, TypeError, ValueError):  # TypeError: a helper of another signature (Gemma 3n)
            continue
        if out.shape != q.shape:
            continue
        written: dict = {}
        exec(ROPE_HELPERS[style], {"torch": torch}, written)  # the helper the references will hold
        if not torch.allclose(out.float(), written["apply_rope"](q, cos, sin), rtol=1e-5, atol=1e-5):
            # ERNIE 4.5: the same widths, but interleaved pairs (GLM's layout) applied in float32
            raise SpecError(f"{type(module).__name__}: its apply_rotary_pos_emb takes {style}-width tables but "
                            f"is not the rotate-half formula the templates write (interleaved pairs?)")
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
    "partial": '''def apply_rope(x, cos, sin):
    """Rotate-half RoPE on the first rope_dim dims of each head; the others pass through.
    x: [batch, heads, seq, head_dim]; cos/sin: [batch, seq, rope_dim]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rot, rest = x[..., : cos.shape[-1]], x[..., cos.shape[-1]:]
    r1, r2 = rot.chunk(2, dim=-1)
    return torch.cat((rot * cos + torch.cat((-r2, r1), dim=-1) * sin, rest), dim=-1)''',
}


def sinks_arg(info: AttentionInfo, dtype: str) -> list[Arg]:
    return [Arg("sinks", ("num_heads",), dtype, "Learned per-head sink logits")] if info.sinks else []


def mask_for(info: AttentionInfo, q_len: int, kv_len: int, dtype):
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


def attention_interface(module):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    impl = module.config._attn_implementation
    fallback = sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS.get_interface(impl, fallback)


# -- core attention ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _CoreWords:
    """What the prefill and decode drafts of the attention kernel share: name, axes, words, weights."""

    base: str  # the name, with {phase}
    heads_axes: dict
    sinks: str  # ", sinks" when the kernel takes learned sinks
    what: str
    extra: str
    params: dict


def _core_words(info: AttentionInfo) -> _CoreWords:
    extras = []
    if info.window:
        extras.append(f"a sliding window of {info.window}")
    if info.sinks:
        extras.append("learned attention sinks")
    return _CoreWords(
        base=f"{info.kind}_attention_{{phase}}_h{info.heads}_kv{info.kv_heads}_d{info.head_dim}{info.core_suffix()}",
        heads_axes={"num_heads": ("const", info.heads, "Query heads"),
                    "num_kv_heads": ("const", info.kv_heads, "Key/value heads"),
                    "head_dim": ("const", info.head_dim, "Head dimension")},
        sinks=", sinks" if info.sinks else "",
        what={"mha": "Multi-head", "gqa": "Grouped-query", "mqa": "Multi-query"}[info.kind],
        extra=(" with " + " and ".join(extras)) if extras else "",
        params={"sinks": "sinks"} if info.sinks else {})


def _core_prefill_draft(info: AttentionInfo, words: _CoreWords, module_ref: str, dtype: str,
                        fixed_seq: int | None) -> Draft:
    def prefill_call(m, inp):
        q, k, v = (inp[n].transpose(1, 2) for n in ("q", "k", "v"))
        mask = mask_for(info, q.shape[2], k.shape[2], q.dtype)
        out, _ = attention_interface(m)(m, q, k, v, mask, dropout=0.0, scaling=m.scaling, sliding_window=info.window)
        return {"output": out}

    sinks = words.sinks
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
    return Draft(
        name=words.base.format(phase="bidirectional" if not info.causal else "prefill"), op_type="attention",
        description=f"{words.what} {causal_word}attention{words.extra} over full sequences (prefill): {info.heads} "
                    f"query heads, {info.kv_heads} key/value heads, head_dim {info.head_dim}, scale "
                    f"{fmt_float(info.scale)}.",
        axes=seq_axes | words.heads_axes,
        inputs=[Arg("q", ("batch_size", "seq_len", "num_heads", "head_dim"), dtype, "Queries (after RoPE)"),
                Arg("k", ("batch_size", "seq_len", "num_kv_heads", "head_dim"), dtype, "Keys (after RoPE)"),
                Arg("v", ("batch_size", "seq_len", "num_kv_heads", "head_dim"), dtype, "Values"),
                *sinks_arg(info, dtype)],
        outputs=[Arg("output", ("batch_size", "seq_len", "num_heads", "head_dim"), dtype, "Attention output")],
        code=prefill_code, shapes="images" if fixed_seq else "prefill",
        check=Check(module_ref, words.params, prefill_call, {"batch_size": 2} if fixed_seq else small_prefill),
    )


def _core_decode_draft(info: AttentionInfo, words: _CoreWords, module_ref: str, dtype: str) -> Draft:
    def decode_call(m, inp):
        q = inp["q"][:, :, None, :]
        k, v = inp["k_cache"].transpose(1, 2), inp["v_cache"].transpose(1, 2)
        mask = mask_for(info, 1, k.shape[2], q.dtype) if info.window or info.eager else None
        out, _ = attention_interface(m)(m, q, k, v, mask, dropout=0.0, scaling=m.scaling, sliding_window=info.window)
        return {"output": out[:, 0]}

    sinks = words.sinks
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
    return Draft(
        name=words.base.format(phase="decode"), op_type="attention",
        description=f"{words.what} attention{words.extra} for decode: one query token per sequence against a KV "
                    f"cache of kv_len positions; {info.heads} query heads, {info.kv_heads} key/value heads, "
                    f"head_dim {info.head_dim}, scale {fmt_float(info.scale)}.",
        axes={"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions (the new token included)")}
        | words.heads_axes,
        inputs=[Arg("q", ("batch_size", "num_heads", "head_dim"), dtype, "Query of the new token (after RoPE)"),
                Arg("k_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Key cache"),
                Arg("v_cache", ("batch_size", "kv_len", "num_kv_heads", "head_dim"), dtype, "Value cache"),
                *sinks_arg(info, dtype)],
        outputs=[Arg("output", ("batch_size", "num_heads", "head_dim"), dtype, "Attention output")],
        code=decode_code, shapes="decode",
        check=Check(module_ref, words.params, decode_call, small_decode),
    )


def core_drafts(info: AttentionInfo, module_ref: str, dtype: str = "bfloat16",
                fixed_seq: int | None = None) -> list[Draft]:
    """The attention kernel alone, on already-projected (and rotated) q, k, v: prefill (or bidirectional),
    and decode for causal attention."""
    words = _core_words(info)
    drafts = [_core_prefill_draft(info, words, module_ref, dtype, fixed_seq)]
    if info.causal:
        drafts.append(_core_decode_draft(info, words, module_ref, dtype))
    return drafts
