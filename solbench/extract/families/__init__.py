"""Turn a traced model into problem drafts, one family module per kind of block.

Each layer kind contributes its norms, attention (MHA/GQA/MQA or MLA), MLP or MoE, the fused layer and
backward problems; the model contributes its embedding, final norm and LM head (or patch embedding), and its rotary table.
Parts that no family recognises are reported, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solbench.extract.draft import Draft
from solbench.extract.families import (
    attention,
    attention_backward,
    attention_block,
    embedding,
    layer,
    mla,
    mlp,
    moe,
    norms,
    rotary,
)
from solbench.extract.trace import TracedModel
from solbench.spec.errors import SpecError

DTYPE_SUFFIX = {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}


@dataclass
class Drafts:
    drafts: list[Draft] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def add(self, *items: Draft | None) -> None:
        for item in items:
            if item is not None and item.name not in {d.name for d in self.drafts}:
                self.drafts.append(item)


def drafts_for(traced: TracedModel, dtype: str = "bfloat16") -> Drafts:
    out = Drafts()
    cfg = traced.hf_config
    fixed_seq = None
    if traced.is_encoder:
        fixed_seq = (cfg.image_size // cfg.patch_size) ** 2 + 1
    for kind in traced.kinds:
        ref = f"layer{kind.index}:"
        lay = kind.module
        try:
            _layer_drafts(out, traced, kind.index, lay, ref, dtype, fixed_seq, kind.layer_type)
        except SpecError as exc:
            out.skipped.append(f"layer {kind.index} ({type(lay).__name__}): {exc}")
        except (AttributeError, TypeError, ValueError, RuntimeError) as exc:  # a layout no template expects
            out.skipped.append(f"layer {kind.index} ({type(lay).__name__}): not a layout the templates know "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
    model = traced.model
    final_norm = _final_norm(model, traced)
    if final_norm is not None:
        path, module = final_norm
        out.add(norms.norm_draft(norms.norm_info(module), f"model:{path}", dtype))
    if traced.is_encoder:
        out.add(embedding.patch_embedding_draft(model.embeddings, cfg, dtype))
    else:
        embed = traced.embedding()
        if embed is not None:
            out.add(embedding.embedding_draft(embed, dtype))
        head = traced.lm_head()
        if head is not None:
            out.add(embedding.lm_head_draft(head, dtype))
        _rotary_drafts(out, model, dtype)
    if dtype != "bfloat16":  # names must not collide with the bf16 problems
        for draft in out.drafts:
            draft.name += "_" + DTYPE_SUFFIX[dtype]
    return out


def _rotary_drafts(out: Drafts, model, dtype: str) -> None:
    found = rotary.rotary_module(model)
    if found is None:
        return
    try:
        out.add(rotary.rotary_table_draft(*found, dtype))
    except SpecError as exc:
        out.skipped.append(f"{found[0]} ({type(found[1]).__name__}): {exc}")


def _layer_drafts(out: Drafts, traced: TracedModel, index: int, lay, ref: str, dtype: str,
                  fixed_seq: int | None, layer_type: str | None) -> None:
    cfg = traced.hf_config
    for name, child in lay.named_children():
        if norms.is_norm(child):
            info = norms.norm_info(child)
            out.add(norms.norm_draft(info, ref + name, dtype), norms.norm_backward_draft(info, ref + name, dtype))
    attn_name = layer.attention_child(lay)
    attn = getattr(lay, attn_name)
    attn_info = None
    try:
        attn_info = _attention_drafts(out, attn, ref + attn_name, cfg, dtype, fixed_seq, layer_type, index)
    except SpecError as exc:
        out.skipped.append(f"layer {index}: attention: {exc}")
    ffn = layer.FfnParts()
    block = getattr(lay, "mlp", None)
    if block is not None and moe.is_moe(block):
        router_path = "gate" if hasattr(block, "gate") else "router"
        ffn.router = moe.router_info(block, cfg)
        ffn.experts = moe.experts_info(block, ffn.router)
        router_ref = f"{ref}mlp" if ffn.router.bias_on_block else f"{ref}mlp.{router_path}"
        out.add(moe.router_draft(ffn.router, router_ref, dtype),
                moe.experts_draft(ffn.experts, f"{ref}mlp.experts", dtype))
        shared = getattr(block, "shared_experts", None)
        if shared is not None:
            ffn.shared = mlp.mlp_info(shared)
            out.add(mlp.mlp_draft(ffn.shared, f"{ref}mlp.shared_experts", dtype))
    elif block is not None and mlp.is_mlp(block):
        try:
            ffn.mlp = mlp.mlp_info(block)
        except SpecError as exc:  # the generic capture takes it
            out.skipped.append(f"layer {index}: feed-forward: {exc}")
            return
        out.add(mlp.mlp_draft(ffn.mlp, ref + "mlp", dtype), mlp.mlp_backward_draft(ffn.mlp, ref + "mlp", dtype))
    else:
        out.skipped.append(f"layer {index}: feed-forward {type(block).__name__} not recognised")
        return
    if attn_info is None:
        out.skipped.append(f"layer {index}: no fused layer problem without its attention")
        return
    phases = ("prefill", "decode") if getattr(attn_info, "causal", True) else ("prefill",)  # MLA is causal
    for phase in phases:
        try:
            out.add(layer.layer_draft(lay, attn_info, ffn, ref.rstrip(":") + ":", dtype, fixed_seq, phase))
        except SpecError as exc:
            out.skipped.append(f"layer {index}: fused {phase} layer: {exc}")


def _attention_drafts(out: Drafts, attn, ref: str, cfg, dtype: str, fixed_seq: int | None,
                      layer_type: str | None, index: int):
    """Attention problems of one layer kind; returns its AttentionInfo or MlaInfo for the fused layer."""
    if mla.is_mla(attn):
        info = mla.mla_info(attn, cfg)
        out.add(*mla.mla_drafts(info, ref, dtype))
        return info
    if not attention.is_attention(attn):
        raise SpecError(f"{type(attn).__name__} not recognised")
    info = attention.attention_info(attn, cfg, layer_type)
    out.add(*attention.core_drafts(info, ref, dtype, fixed_seq))
    out.add(*attention_block.block_drafts(info, ref, dtype, fixed_seq))
    out.add(attention_backward.core_backward_draft(info, ref, dtype))
    return info


def _final_norm(model, traced: TracedModel):
    for path in ("model.norm", "norm", "layernorm", "model.final_layernorm"):
        try:
            module = model.get_submodule(path)
        except AttributeError:
            continue
        if norms.is_norm(module):
            return path, module
    return None
