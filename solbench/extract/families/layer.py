"""The fused decoder (or encoder) layer: norms, attention, MLP or MoE and residuals as one problem.

The reference is composed from the same helper sources as the standalone problems, so a layer and
its parts cannot disagree about what a part computes. Attention is either the standard block
(MHA/GQA/MQA) or multi-head latent attention (MLA); causal layers get a prefill problem and a decode
problem (one new token per sequence against the cache the model keeps, returning the new entries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import nn

from solbench.extract.draft import Arg, Check, Draft, name_float
from solbench.extract.families import attention as attn_mod
from solbench.extract.families import attention_block as block_mod
from solbench.extract.families import mla as mla_mod
from solbench.extract.families import mlp as mlp_mod
from solbench.extract.families import moe as moe_mod
from solbench.extract.families.norms import WEIGHT_INIT, NormInfo, norm_info
from solbench.spec.errors import SpecError

PRE_NORM_PAIRS = (("input_layernorm", "post_attention_layernorm"), ("layernorm_before", "layernorm_after"))
SANDWICH = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")
NORM_ARG = {"input_layernorm": "input_norm", "post_attention_layernorm": "post_attention_norm",
            "pre_feedforward_layernorm": "pre_feedforward_norm", "post_feedforward_layernorm": "post_feedforward_norm",
            "layernorm_before": "input_norm", "layernorm_after": "post_attention_norm"}


@dataclass
class FfnParts:
    mlp: mlp_mod.MlpInfo | None = None
    router: moe_mod.RouterInfo | None = None
    experts: moe_mod.ExpertsInfo | None = None
    shared: mlp_mod.MlpInfo | None = None

    def tag(self) -> str:
        if self.mlp is not None:
            return self.mlp.name.replace("_mlp", "").replace(f"_h{self.mlp.hidden}", "")
        r, e = self.router, self.experts
        tag = f"moe_{r.style}_e{e.experts}_k{e.top_k}_i{e.intermediate}"
        if e.style == "gptoss":
            tag += "_clamped"
        if self.shared is not None:
            tag += f"_shared{self.shared.intermediate}"
        return tag


@dataclass
class AttentionPart:
    """What the attention of one layer contributes to the layer's reference, for one phase."""

    args: list[Arg]  # weights, prefixed "attn_"
    params: dict[str, str]  # input -> parameter path under the attention module
    helpers: list[str]
    consts: str
    norm_styles: set[str]  # norms inside the attention (they share the layer's `rms_norm` helper)
    lines: list[str]  # from the normalised `x` to the attention output `x` (decode: also the new entries)
    rope_args: list[Arg]
    tag: str
    summary: str
    const_axes: dict[str, tuple]
    position_embeddings: Callable | None  # (cos, sin) -> what the module takes; None without RoPE
    mask: Callable[[int, int, object], object]  # (q_len, kv_len, dtype) -> the mask transformers would pass
    cache_args: list[Arg] = field(default_factory=list)  # decode: the cache of the previous positions
    new_entries: list[Arg] = field(default_factory=list)  # decode: what the new token appends
    cache: Callable | None = None  # (inputs, layer_idx) -> a transformers cache holding cache_args
    news: Callable | None = None  # (cache, layer_idx) -> the new entries the module appended


def attention_child(layer: nn.Module) -> str:
    for name in ("self_attn", "attention"):
        if hasattr(layer, name):
            return name
    raise SpecError(f"{type(layer).__name__}: no attention submodule")


def norm_layout(layer: nn.Module) -> tuple[str, ...]:
    if all(hasattr(layer, n) for n in SANDWICH):
        return SANDWICH
    for pair in PRE_NORM_PAIRS:
        if all(hasattr(layer, n) for n in pair):
            return pair
    raise SpecError(f"{type(layer).__name__}: unknown norm layout")


def standard_part(info: attn_mod.AttentionInfo, dtype: str, decode: bool) -> AttentionPart:
    args, params = block_mod.block_inputs(info, dtype, prefix="attn_")
    helpers = ([attn_mod.ROPE_HELPERS[info.rope]] if info.rope else []) + [attn_mod.attention_helper(info)]
    project = block_mod.projection_source(info, "x", "attn_", indent="").strip()
    output = block_mod.output_source(info, "x", "attn_", indent="")
    rope_args: list[Arg] = []
    if info.rope:
        init = "cos_half" if info.rope == "half" else "cos"
        lead = ("batch_size",) if decode else ("batch_size", "seq_len")
        where = " at each new token's position" if decode else ""
        rope_args = [Arg("cos", (*lead, "rope_dim"), dtype, f"RoPE cosines{where}", init=init),
                     Arg("sin", (*lead, "rope_dim"), dtype, f"RoPE sines{where}", init=init.replace("cos", "sin"))]
    const_axes = info.const_axes()
    part = AttentionPart(
        args=args, params=params, helpers=helpers, consts=attn_mod.constants(info, block=True),
        norm_styles={info.qk_norm.style} if info.qk_norm else set(), lines=[project, output], rope_args=rope_args,
        tag=block_mod.block_name(info, "x").removeprefix("attention_block_x_"),
        summary=f"{info.kind.upper()} attention with {info.heads}/{info.kv_heads} heads of {info.head_dim}",
        const_axes=const_axes, position_embeddings=(lambda c, s: (c, s)) if info.rope else None,
        mask=lambda q_len, kv_len, dt: attn_mod.mask_for(info, q_len, kv_len, dt))
    if decode:
        kv = ("batch_size", "kv_len", "num_kv_heads", "head_dim")
        new = ("batch_size", "num_kv_heads", "head_dim")
        part.lines = [project, "k_new, v_new = k[:, :, 0], v[:, :, 0]",
                      "k = torch.cat((k_cache.transpose(1, 2), k), dim=2)",
                      "v = torch.cat((v_cache.transpose(1, 2), v), dim=2)", output]
        part.cache_args = [Arg("k_cache", kv, dtype, "Key cache of the previous positions (after RoPE)"),
                           Arg("v_cache", kv, dtype, "Value cache of the previous positions")]
        part.new_entries = [Arg("k_new", new, dtype, "New key to append"),
                            Arg("v_new", new, dtype, "New value to append")]
        part.cache, part.news = _kv_cache, _kv_news
    return part


def _kv_cache(inp: dict, layer_idx: int):
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.update(inp["k_cache"].transpose(1, 2), inp["v_cache"].transpose(1, 2), layer_idx)
    return cache


def _kv_news(cache, layer_idx: int) -> dict:
    layer = cache.layers[layer_idx]
    return {"k_new": layer.keys[:, :, -1], "v_new": layer.values[:, :, -1]}


def mla_part(info: mla_mod.MlaInfo, dtype: str, decode: bool) -> AttentionPart:
    args, params = mla_mod.weights(info, dtype, prefix="attn_")
    attend = mla_mod.attend_source("attn_", out="x")
    lines = ["batch, seq = x.shape[0], x.shape[1]", *mla_mod.query_source(info, "x", "attn_")]
    lines += [*mla_mod.APPEND, *attend] if decode else attend
    part = AttentionPart(
        args=args, params=params, helpers=[info.rope_helper],
        consts=f"HIDDEN_SIZE = {info.hidden}\n{mla_mod.constants(info)}", norm_styles={info.norm.style},
        lines=lines, rope_args=info.rope_args(dtype, decode), tag="mla_" + info.name("x").removeprefix(
            "mla_attention_block_x_"),
        summary=f"multi-head latent attention ({mla_mod.description(info)})", const_axes=info.const_axes(),
        position_embeddings=info.position_embeddings, mask=lambda q_len, kv_len, dt: None)
    if decode:
        part.cache_args, part.new_entries = mla_mod.cache_args(dtype), mla_mod.cache_outputs(dtype)
        part.cache, part.news = mla_mod.module_cache, mla_mod.cache_news
    return part


@dataclass
class _Norms:
    """The layer's norms (pre-norm pair or sandwich) as arguments and calls of its reference."""

    names: tuple[str, ...]
    infos: dict[str, NormInfo]
    dtype: str

    @property
    def sandwich(self) -> bool:
        return self.names == SANDWICH

    @property
    def first(self) -> NormInfo:
        return next(iter(self.infos.values()))

    def args(self, child: str) -> tuple[list[Arg], dict[str, str]]:
        info, base = self.infos[child], NORM_ARG[child]
        args = [Arg(f"{base}_weight", ("hidden_size",), self.dtype, f"{child} weight", init=WEIGHT_INIT[info.style])]
        params = {f"{base}_weight": f"{child}.weight"}
        if info.style == "layernorm":
            args.append(Arg(f"{base}_bias", ("hidden_size",), self.dtype, f"{child} bias", init="bias"))
            params[f"{base}_bias"] = f"{child}.bias"
        return args, params

    def call(self, child: str, x: str) -> str:
        info, base = self.infos[child], NORM_ARG[child]
        return info.call(x, f"{base}_weight", f"{base}_bias" if info.style == "layernorm" else None)


@dataclass
class _FfnCode:
    """What the feed-forward half contributes to the layer's reference."""

    args: list[Arg] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    helpers: list[str] = field(default_factory=list)
    consts: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    hints: dict = field(default_factory=dict)


def _ffn_code(layer: nn.Module, ffn: FfnParts, dtype: str, tokens: str) -> _FfnCode:
    """A dense MLP, or a routed MoE (with a shared expert when the layer has one)."""
    code = _FfnCode()
    if ffn.mlp is not None:
        m_args, m_params = mlp_mod.weights(ffn.mlp, dtype, prefix="mlp_")
        code.args += m_args
        code.params |= {k: f"mlp.{v}" for k, v in m_params.items()}
        code.helpers.append(mlp_mod.helper(ffn.mlp))
        code.lines.append(f"x = mlp(x, {', '.join(a.name for a in m_args)})")
        return code
    router_path = "gate" if hasattr(layer.mlp, "gate") else "router"
    r_args, r_params = moe_mod.router_args(ffn.router, dtype, prefix="moe_")
    e_args, e_params = moe_mod.experts_args(ffn.experts, dtype, prefix="moe_")
    code.args += r_args + e_args
    router_base = "mlp" if ffn.router.bias_on_block else f"mlp.{router_path}"
    code.params |= {k: f"{router_base}.{v}" for k, v in r_params.items()}
    code.params |= {k: f"mlp.experts.{v}" for k, v in e_params.items()}
    code.consts.append(moe_mod.router_constants(ffn.router))
    if moe_mod.experts_constants(ffn.experts):
        code.consts.append(moe_mod.experts_constants(ffn.experts))
    code.helpers += [moe_mod.router_helper(ffn.router), moe_mod.experts_helper(ffn.experts)]
    code.lines += ["flat = x.reshape(-1, HIDDEN_SIZE)",
                   f"topk_weights, topk_ids = route(flat, {', '.join(a.name for a in r_args)})",
                   f"y = experts(flat, topk_ids, topk_weights, {', '.join(a.name for a in e_args)})"]
    if ffn.shared is not None:
        s_args, s_params = mlp_mod.weights(ffn.shared, dtype, prefix="shared_", width="shared_intermediate_size")
        code.args += s_args
        code.params |= {k: f"mlp.shared_experts.{v}" for k, v in s_params.items()}
        code.helpers.append(mlp_mod.helper(ffn.shared))
        code.lines.append(f"y = y + mlp(flat, {', '.join(a.name for a in s_args)})")
    code.lines.append("x = y.view_as(x)")
    code.hints = moe_mod.hints(ffn.experts, prefix="moe_", tokens=tokens)
    return code


def _layer_body(norms: _Norms, part: AttentionPart, ffn_lines: list[str], decode: bool) -> tuple[str, str]:
    """The reference's body (indented) and docstring: residual, norm, attention, residual, norm, feed-forward."""
    names, sandwich = norms.names, norms.sandwich
    body = ["residual = hidden_states", f"x = {norms.call(names[0], 'hidden_states')}", *part.lines]
    if sandwich:
        body.append(f"x = {norms.call(names[1], 'x')}")
    body += ["hidden_states = residual + x", "residual = hidden_states",
             f"x = {norms.call(names[2] if sandwich else names[1], 'hidden_states')}", *ffn_lines]
    if sandwich:
        body.append(f"x = {norms.call(names[3], 'x')}")
    if decode:
        unsqueeze = ["hidden_states = hidden_states[:, None, :]"]
        if part.rope_args:
            unsqueeze.append("cos, sin = cos[:, None], sin[:, None]")
        news = ", ".join(a.name for a in part.new_entries)
        body = [*unsqueeze, *body, "output = residual + x", f"return output[:, 0], {news}"]
        cache_doc = "; ".join(f"{a.name}: [{', '.join(a.shape).replace('_size', '')}]" for a in part.cache_args)
        doc = (f'"""One new token per sequence against the cache of the previous kv_len positions.\n\n'
               f"    hidden_states: [batch, hidden]; {cache_doc}.\n"
               f"    Returns the layer output [batch, hidden] and the new token's {news} (to append to the cache)."
               f'"""')
    else:
        body.append("return residual + x")
        doc = '"""hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""'
    return "\n".join("    " + line for block in body for line in block.split("\n")), doc


def _layer_call(part: AttentionPart, attn_name: str, decode: bool, causal: bool) -> Callable:
    """How the transformers layer is called on the problem's inputs, for the check against it."""

    def call(m, inp):
        x = inp["hidden_states"]
        kwargs = {}
        if part.position_embeddings is not None:
            cos, sin = (inp["cos"][:, None], inp["sin"][:, None]) if decode else (inp["cos"], inp["sin"])
            kwargs["position_embeddings"] = part.position_embeddings(cos, sin)
        if not decode:
            if causal:
                kwargs["attention_mask"] = part.mask(x.shape[1], x.shape[1], x.dtype)
            out = m(x, **kwargs)
            return {"output": out[0] if isinstance(out, tuple) else out}
        layer_idx = getattr(m, attn_name).layer_idx
        cache = part.cache(inp, layer_idx)
        kv_len = inp[part.cache_args[0].name].shape[1] + 1
        out = m(x[:, None], attention_mask=part.mask(1, kv_len, x.dtype), past_key_values=cache, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        return {"output": out[:, 0]} | part.news(cache, layer_idx)

    return call


def _seq_axes(decode: bool, fixed_seq: int | None, causal: bool, mla: bool) -> tuple[dict, str]:
    """The axes that vary with the phase, and the phase's words in the description."""
    if decode:
        cache_word = "compressed cache (latents and RoPE keys)" if mla else "KV cache"
        return ({"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions before the new token")},
                f"; decode: one new token per sequence against a {cache_word} of kv_len previous positions, "
                f"returning the new cache entries too")
    if fixed_seq:
        return {"batch_size": ("var", "Images"), "seq_len": ("const", fixed_seq, "Tokens per image")}, ""
    return ({"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence")},
            "; causal prefill" if causal else "")


def _ffn_axes(ffn: FfnParts) -> dict:
    if ffn.mlp is not None:
        return {"intermediate_size": ("const", ffn.mlp.intermediate, "MLP width")}
    axes = {"num_experts": ("const", ffn.experts.experts, "Routed experts"),
            "top_k": ("const", ffn.experts.top_k, "Experts per token"),
            "intermediate_size": ("const", ffn.experts.intermediate, "Expert width")}
    if ffn.shared is not None:
        axes["shared_intermediate_size"] = ("const", ffn.shared.intermediate, "Shared expert width")
    return axes


def _ffn_description(ffn: FfnParts) -> str:
    if ffn.mlp:
        return f"{ffn.mlp.name.replace('_', ' ')}"
    return (f"MoE with {ffn.experts.experts} experts (top {ffn.experts.top_k})"
            + (" plus a shared expert" if ffn.shared else ""))


def _outputs_and_small(info, part: AttentionPart, dtype: str, decode: bool,
                       fixed_seq: int | None) -> tuple[list[Arg], dict[str, int]]:
    """The layer's outputs and the small axes its check runs at."""
    if decode:
        small = {"batch_size": 2, "kv_len": 11}
        window = getattr(info, "window", None)
        if window and window <= 1024:
            small["kv_len"] = window + 4  # longer than the window, so a kernel that ignores it fails
        return [Arg("output", ("batch_size", "hidden_size"), dtype, "Layer output"), *part.new_entries], small
    small = {"batch_size": 1} if fixed_seq else {"batch_size": 2, "seq_len": 6}
    return [Arg("output", ("batch_size", "seq_len", "hidden_size"), dtype, "Layer output")], small


def _layer_name(causal: bool, phase: str, part: AttentionPart, ffn: FfnParts, norms: _Norms) -> str:
    style_tag = {"rms": "", "rms_fp32mul": "fp32mul", "rms_oneplus": "oneplus", "layernorm": "ln"}[norms.first.style]
    kind = "decoder" if causal else "encoder"
    phase_tag = f"_{phase}" if causal else ""
    name = (f"{kind}_layer{phase_tag}_{part.tag}_{ffn.tag()}{'_sandwich' if norms.sandwich else ''}_"
            f"{style_tag}eps{name_float(norms.first.eps)}")
    return name.replace("__", "_")


def layer_draft(layer: nn.Module, info: attn_mod.AttentionInfo | mla_mod.MlaInfo, ffn: FfnParts, module_ref: str,
                dtype: str = "bfloat16", fixed_seq: int | None = None, phase: str = "prefill") -> Draft:
    """The whole layer for `phase`: "prefill" (causal or, for encoders, bidirectional) or "decode"."""
    decode = phase == "decode"
    mla = isinstance(info, mla_mod.MlaInfo)
    causal = True if mla else info.causal
    if decode and not causal:
        raise SpecError("an encoder layer has no decode phase")
    part = mla_part(info, dtype, decode) if mla else standard_part(info, dtype, decode)
    layout = norm_layout(layer)
    norms = _Norms(layout, {n: norm_info(getattr(layer, n)) for n in layout}, dtype)
    styles = {i.style for i in norms.infos.values()} | part.norm_styles
    if len(styles) != 1:
        raise SpecError(f"{type(layer).__name__} mixes norm conventions {sorted(styles)}")
    attn_name = attention_child(layer)

    if decode:
        inputs: list[Arg] = [Arg("hidden_states", ("batch_size", "hidden_size"), dtype, "New token activations")]
    else:
        inputs = [Arg("hidden_states", ("batch_size", "seq_len", "hidden_size"), dtype, "Layer input")]
    params: dict[str, str] = {}
    for position, child in enumerate(layout):
        args, child_params = norms.args(child)
        inputs += args
        params |= child_params
        if position == 0:  # the attention's weights come right after its norm's
            inputs += part.args
            params |= {k: f"{attn_name}.{v}" for k, v in part.params.items()}
    tokens = "batch_size" if decode else ("batch_size" if fixed_seq else "batch_size * seq_len")
    ffn_code = _ffn_code(layer, ffn, dtype, tokens)
    inputs += ffn_code.args + part.rope_args + part.cache_args
    params |= ffn_code.params

    body_src, doc = _layer_body(norms, part, ffn_code.lines, decode)
    const_src = "\n".join(c for c in [part.consts, *ffn_code.consts] if c)
    helper_src = "\n\n\n".join(dict.fromkeys([norms.first.helper, *part.helpers, *ffn_code.helpers]))
    names = ", ".join(a.name for a in inputs)
    code = f'''{const_src}


{helper_src}


@torch.no_grad()
def run({names}):
    {doc}
{body_src}
'''
    kind = "decoder" if causal else "encoder"
    seq_axes, phase_desc = _seq_axes(decode, fixed_seq, causal, mla)
    outputs, small = _outputs_and_small(info, part, dtype, decode, fixed_seq)
    return Draft(
        name=_layer_name(causal, phase, part, ffn, norms), op_type=f"{kind}_layer",
        description=f"A whole {kind} layer ({'sandwich' if norms.sandwich else 'pre'}-norm, {part.summary}, "
                    f"{_ffn_description(ffn)}) as one fused problem{phase_desc}.",
        axes=seq_axes | dict(part.const_axes) | _ffn_axes(ffn),
        inputs=inputs,
        outputs=outputs,
        code=code, shapes="decode" if decode else ("images" if fixed_seq else "layer"), tolerance_scale=2.0,
        check=Check(module_ref, params, _layer_call(part, attn_name, decode, causal), small),
        hints=ffn_code.hints,
    )
