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


def layer_draft(layer: nn.Module, info: attn_mod.AttentionInfo | mla_mod.MlaInfo, ffn: FfnParts, module_ref: str,
                dtype: str = "bfloat16", fixed_seq: int | None = None, phase: str = "prefill") -> Draft:
    """The whole layer for `phase`: "prefill" (causal or, for encoders, bidirectional) or "decode"."""
    decode = phase == "decode"
    mla = isinstance(info, mla_mod.MlaInfo)
    causal = True if mla else info.causal
    if decode and not causal:
        raise SpecError("an encoder layer has no decode phase")
    part = mla_part(info, dtype, decode) if mla else standard_part(info, dtype, decode)
    norms = norm_layout(layer)
    norm_infos: dict[str, NormInfo] = {n: norm_info(getattr(layer, n)) for n in norms}
    styles = {i.style for i in norm_infos.values()} | part.norm_styles
    if len(styles) != 1:
        raise SpecError(f"{type(layer).__name__} mixes norm conventions {sorted(styles)}")
    sandwich = norms == SANDWICH
    attn_name = attention_child(layer)

    if decode:
        inputs: list[Arg] = [Arg("hidden_states", ("batch_size", "hidden_size"), dtype, "New token activations")]
    else:
        inputs = [Arg("hidden_states", ("batch_size", "seq_len", "hidden_size"), dtype, "Layer input")]
    params: dict[str, str] = {}

    def norm_args(child: str) -> list[str]:
        ni = norm_infos[child]
        base = NORM_ARG[child]
        inputs.append(Arg(f"{base}_weight", ("hidden_size",), dtype, f"{child} weight", init=WEIGHT_INIT[ni.style]))
        params[f"{base}_weight"] = f"{child}.weight"
        names = [f"{base}_weight"]
        if ni.style == "layernorm":
            inputs.append(Arg(f"{base}_bias", ("hidden_size",), dtype, f"{child} bias", init="bias"))
            params[f"{base}_bias"] = f"{child}.bias"
            names.append(f"{base}_bias")
        return names

    def apply_norm(child: str, x: str) -> str:
        base = NORM_ARG[child]
        ni = norm_infos[child]
        return ni.call(x, f"{base}_weight", f"{base}_bias" if ni.style == "layernorm" else None)

    norm_args(norms[0])
    inputs += part.args
    params |= {k: f"{attn_name}.{v}" for k, v in part.params.items()}
    for child in norms[1:]:
        norm_args(child)

    helpers: list[str] = [next(iter(norm_infos.values())).helper, *part.helpers]
    consts = [part.consts]
    ffn_lines: list[str] = []
    hints: dict = {}
    if ffn.mlp is not None:
        m_args, m_params = mlp_mod.weights(ffn.mlp, dtype, prefix="mlp_")
        inputs += m_args
        params |= {k: f"mlp.{v}" for k, v in m_params.items()}
        helpers.append(mlp_mod.helper(ffn.mlp))
        ffn_lines.append(f"x = mlp(x, {', '.join(a.name for a in m_args)})")
    else:
        router_path = "gate" if hasattr(layer.mlp, "gate") else "router"
        r_args, r_params = moe_mod.router_args(ffn.router, dtype, prefix="moe_")
        e_args, e_params = moe_mod.experts_args(ffn.experts, dtype, prefix="moe_")
        inputs += r_args + e_args
        params |= {k: f"mlp.{router_path}.{v}" for k, v in r_params.items()}
        params |= {k: f"mlp.experts.{v}" for k, v in e_params.items()}
        consts.append(moe_mod.router_constants(ffn.router))
        if moe_mod.experts_constants(ffn.experts):
            consts.append(moe_mod.experts_constants(ffn.experts))
        helpers += [moe_mod.router_helper(ffn.router), moe_mod.experts_helper(ffn.experts)]
        ffn_lines += ["flat = x.reshape(-1, HIDDEN_SIZE)",
                      f"topk_weights, topk_ids = route(flat, {', '.join(a.name for a in r_args)})",
                      f"y = experts(flat, topk_ids, topk_weights, {', '.join(a.name for a in e_args)})"]
        if ffn.shared is not None:
            s_args, s_params = mlp_mod.weights(ffn.shared, dtype, prefix="shared_", width="shared_intermediate_size")
            inputs += s_args
            params |= {k: f"mlp.shared_experts.{v}" for k, v in s_params.items()}
            helpers.append(mlp_mod.helper(ffn.shared))
            ffn_lines.append(f"y = y + mlp(flat, {', '.join(a.name for a in s_args)})")
        ffn_lines.append("x = y.view_as(x)")
        tokens = "batch_size" if decode else ("batch_size" if fixed_seq else "batch_size * seq_len")
        hints = moe_mod.hints(ffn.experts, prefix="moe_", tokens=tokens)
    inputs += part.rope_args + part.cache_args

    body = ["residual = hidden_states", f"x = {apply_norm(norms[0], 'hidden_states')}", *part.lines]
    if sandwich:
        body.append(f"x = {apply_norm(norms[1], 'x')}")
    body += ["hidden_states = residual + x", "residual = hidden_states",
             f"x = {apply_norm(norms[2] if sandwich else norms[1], 'hidden_states')}", *ffn_lines]
    if sandwich:
        body.append(f"x = {apply_norm(norms[3], 'x')}")
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
    body_src = "\n".join("    " + line for block in body for line in block.split("\n"))

    const_src = "\n".join(c for c in consts if c)
    helper_src = "\n\n\n".join(dict.fromkeys(helpers))
    names = ", ".join(a.name for a in inputs)
    code = f'''{const_src}


{helper_src}


@torch.no_grad()
def run({names}):
    {doc}
{body_src}
'''
    eps = name_float(next(iter(norm_infos.values())).eps)
    style = next(iter(norm_infos.values())).style
    style_tag = {"rms": "", "rms_fp32mul": "fp32mul", "rms_oneplus": "oneplus", "layernorm": "ln"}[style]
    kind = "decoder" if causal else "encoder"
    phase_tag = f"_{phase}" if causal else ""
    name = f"{kind}_layer{phase_tag}_{part.tag}_{ffn.tag()}{'_sandwich' if sandwich else ''}_{style_tag}eps{eps}"
    name = name.replace("__", "_")

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

    ffn_desc = (f"{ffn.mlp.name.replace('_', ' ')}" if ffn.mlp else
                f"MoE with {ffn.experts.experts} experts (top {ffn.experts.top_k})"
                + (" plus a shared expert" if ffn.shared else ""))
    if decode:
        seq_axes = {"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions before the new token")}
        cache_word = "compressed cache (latents and RoPE keys)" if mla else "KV cache"
        phase_desc = (f"; decode: one new token per sequence against a {cache_word} of kv_len previous positions, "
                      f"returning the new cache entries too")
    elif fixed_seq:
        seq_axes = {"batch_size": ("var", "Images"), "seq_len": ("const", fixed_seq, "Tokens per image")}
        phase_desc = ""
    else:
        seq_axes = {"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence")}
        phase_desc = "; causal prefill" if causal else ""
    const_axes = dict(part.const_axes)
    if ffn.mlp is not None:
        const_axes["intermediate_size"] = ("const", ffn.mlp.intermediate, "MLP width")
    else:
        const_axes |= {"num_experts": ("const", ffn.experts.experts, "Routed experts"),
                       "top_k": ("const", ffn.experts.top_k, "Experts per token"),
                       "intermediate_size": ("const", ffn.experts.intermediate, "Expert width")}
        if ffn.shared is not None:
            const_axes["shared_intermediate_size"] = ("const", ffn.shared.intermediate, "Shared expert width")
    if decode:
        small = {"batch_size": 2, "kv_len": 11}
        window = getattr(info, "window", None)
        if window and window <= 1024:
            small["kv_len"] = window + 4  # longer than the window, so a kernel that ignores it fails
        outputs = [Arg("output", ("batch_size", "hidden_size"), dtype, "Layer output"), *part.new_entries]
    else:
        small = {"batch_size": 1} if fixed_seq else {"batch_size": 2, "seq_len": 6}
        outputs = [Arg("output", ("batch_size", "seq_len", "hidden_size"), dtype, "Layer output")]
    return Draft(
        name=name, op_type=f"{kind}_layer",
        description=f"A whole {kind} layer ({'sandwich' if sandwich else 'pre'}-norm, {part.summary}, "
                    f"{ffn_desc}) as one fused problem{phase_desc}.",
        axes=seq_axes | const_axes,
        inputs=inputs,
        outputs=outputs,
        code=code, shapes="decode" if decode else ("images" if fixed_seq else "layer"), tolerance_scale=2.0,
        check=Check(module_ref, params, call, small),
        hints=hints,
    )
