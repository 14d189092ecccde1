"""The fused decoder (or encoder) layer: norms, attention, MLP or MoE and residuals as one problem.

The reference is composed from the same helper sources as the standalone problems, so a layer and
its parts cannot disagree about what a part computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from solbench.extract.draft import Arg, Check, Draft, name_float
from solbench.extract.families import attention as attn_mod
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


def layer_draft(layer: nn.Module, info: attn_mod.AttentionInfo, ffn: FfnParts, module_ref: str,
                dtype: str = "bfloat16", fixed_seq: int | None = None) -> Draft:
    norms = norm_layout(layer)
    norm_infos: dict[str, NormInfo] = {n: norm_info(getattr(layer, n)) for n in norms}
    styles = {i.style for i in norm_infos.values()} | ({info.qk_norm.style} if info.qk_norm else set())
    if len(styles) != 1:
        raise SpecError(f"{type(layer).__name__} mixes norm conventions {sorted(styles)}")
    sandwich = norms == SANDWICH
    attn_name = attention_child(layer)

    inputs: list[Arg] = [Arg("hidden_states", ("batch_size", "seq_len", "hidden_size"), dtype, "Layer input")]
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
    a_args, a_params = attn_mod.block_inputs(info, dtype, prefix="attn_")
    inputs += a_args
    params |= {k: f"{attn_name}.{v}" for k, v in a_params.items()}
    for child in norms[1:]:
        norm_args(child)

    helpers: list[str] = [next(iter(norm_infos.values())).helper]
    if info.rope:
        helpers.append(attn_mod.ROPE_HELPERS[info.rope])
    helpers.append(attn_mod.attention_helper(info))
    consts = [attn_mod.constants(info, block=True)]
    ffn_lines: list[str] = []
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
            s_args, s_params = mlp_mod.weights(ffn.shared, dtype, prefix="shared_")
            inputs += s_args
            params |= {k: f"mlp.shared_experts.{v}" for k, v in s_params.items()}
            helpers.append(mlp_mod.helper(ffn.shared))
            ffn_lines.append(f"y = y + mlp(flat, {', '.join(a.name for a in s_args)})")
        ffn_lines.append("x = y.view_as(x)")

    rope_args = []
    if info.rope:
        init = "cos_half" if info.rope == "half" else "cos"
        rope_args = [Arg("cos", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE cosines", init=init),
                     Arg("sin", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE sines",
                         init=init.replace("cos", "sin"))]
    inputs += rope_args

    body = ["residual = hidden_states", f"x = {apply_norm(norms[0], 'hidden_states')}",
            attn_mod.projection_source(info, "x", "attn_", indent="").strip(),
            attn_mod.output_source(info, "x", "attn_", indent="")]
    if sandwich:
        body.append(f"x = {apply_norm(norms[1], 'x')}")
    body += ["hidden_states = residual + x", "residual = hidden_states",
             f"x = {apply_norm(norms[2] if sandwich else norms[1], 'hidden_states')}", *ffn_lines]
    if sandwich:
        body.append(f"x = {apply_norm(norms[3], 'x')}")
    body.append("return residual + x")
    body_src = "\n".join("    " + line for block in body for line in block.split("\n"))

    const_src = "\n".join(c for c in consts if c)
    helper_src = "\n\n\n".join(dict.fromkeys(helpers))
    names = ", ".join(a.name for a in inputs)
    code = f'''{const_src}


{helper_src}


@torch.no_grad()
def run({names}):
    """hidden_states: [batch, seq, hidden] -> [batch, seq, hidden]."""
{body_src}
'''
    eps = name_float(next(iter(norm_infos.values())).eps)
    style = next(iter(norm_infos.values())).style
    style_tag = {"rms": "", "rms_fp32mul": "fp32mul", "rms_oneplus": "oneplus", "layernorm": "ln"}[style]
    attn_tag = attn_mod.block_name(info, "x").removeprefix("attention_block_x_")
    kind = "decoder" if info.causal else "encoder"
    phase = "_prefill" if info.causal else ""
    name = f"{kind}_layer{phase}_{attn_tag}_{ffn.tag()}{'_sandwich' if sandwich else ''}_{style_tag}eps{eps}"
    name = name.replace("__", "_")

    def call(m, inp):
        x = inp["hidden_states"]
        kwargs = {"position_embeddings": (inp["cos"], inp["sin"])} if info.rope else {}
        if info.causal:
            kwargs["attention_mask"] = attn_mod._mask_for(info, x.shape[1], x.shape[1], x.dtype)
        out = m(x, **kwargs)
        return {"output": out[0] if isinstance(out, tuple) else out}

    ffn_desc = (f"{ffn.mlp.name.replace('_', ' ')}" if ffn.mlp else
                f"MoE with {ffn.experts.experts} experts (top {ffn.experts.top_k})"
                + (" plus a shared expert" if ffn.shared else ""))
    seq_axes = {"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence")}
    if fixed_seq:
        seq_axes = {"batch_size": ("var", "Images"), "seq_len": ("const", fixed_seq, "Tokens per image")}
    const_axes = {"hidden_size": ("const", info.hidden, "Model width"),
                  "num_heads": ("const", info.heads, "Query heads"),
                  "num_kv_heads": ("const", info.kv_heads, "Key/value heads"),
                  "head_dim": ("const", info.head_dim, "Head dimension")}
    if info.rope:
        const_axes["rope_dim"] = ("const", info.rope_dim(), "Width of the cos/sin tables")
    if ffn.mlp is not None:
        const_axes["intermediate_size"] = ("const", ffn.mlp.intermediate, "MLP width")
    else:
        const_axes |= {"num_experts": ("const", ffn.experts.experts, "Routed experts"),
                       "top_k": ("const", ffn.experts.top_k, "Experts per token"),
                       "intermediate_size": ("const", ffn.experts.intermediate, "Expert width")}
    return Draft(
        name=name, op_type=f"{kind}_layer",
        description=f"A whole {kind} layer ({'sandwich' if sandwich else 'pre'}-norm, "
                    f"{info.kind.upper()} attention with {info.heads}/{info.kv_heads} heads of {info.head_dim}, "
                    f"{ffn_desc}) as one fused problem{'; causal prefill' if info.causal else ''}.",
        axes=seq_axes | const_axes,
        inputs=inputs,
        outputs=[Arg("output", ("batch_size", "seq_len", "hidden_size"), dtype, "Layer output")],
        code=code, shapes="images" if fixed_seq else "layer", tolerance_scale=2.0,
        check=Check(module_ref, params, call, {"batch_size": 1} if fixed_seq else {"batch_size": 2, "seq_len": 6}),
        hints=moe_mod.hints(ffn.experts) if ffn.experts else {},
    )
