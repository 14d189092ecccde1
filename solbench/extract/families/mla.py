"""Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key/value paths with a shared RoPE key.

Decode keeps the compressed cache that the model keeps (the normalised latent and the rotated RoPE key),
so the decode problem reads kv_len x (kv_lora_rank + rope_dim) values per sequence, not full keys/values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from solbench.extract.draft import Arg, Check, Draft, name_float
from solbench.extract.families.attention import ROPE_HELPERS
from solbench.extract.families.norms import WEIGHT_INIT, NormInfo, norm_info

INTERLEAVED_ROPE = '''def apply_rope(x, cos, sin):
    """Interleaved RoPE: pairs (x0, x1), (x2, x3), ... rotate together and the result lists the rotated first
    elements of every pair, then the second ones. cos/sin: [batch, seq, rope_dim] (halves repeat the angles)."""
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(1)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)'''


@dataclass(frozen=True)
class MlaInfo:
    hidden: int
    heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int
    scale: float
    interleaved: bool
    norm: NormInfo

    def name(self, phase: str) -> str:
        q = f"qr{self.q_lora_rank}" if self.q_lora_rank else "qfull"
        return (f"mla_attention_block_{phase}_hs{self.hidden}_h{self.heads}_{q}_kvr{self.kv_lora_rank}"
                f"_nope{self.nope_dim}_rope{self.rope_dim}_v{self.v_dim}{'_ropeinterleave' if self.interleaved else ''}"
                f"_scale{name_float(self.scale)}")


def is_mla(module: nn.Module) -> bool:
    return hasattr(module, "kv_a_proj_with_mqa") and hasattr(module, "kv_b_proj")


def mla_info(module: nn.Module, hf_cfg) -> MlaInfo:
    return MlaInfo(
        hidden=module.hidden_size, heads=module.num_heads, q_lora_rank=module.q_lora_rank,
        kv_lora_rank=module.kv_lora_rank, nope_dim=module.qk_nope_head_dim, rope_dim=module.qk_rope_head_dim,
        v_dim=module.v_head_dim, scale=float(module.scaling), interleaved=bool(getattr(hf_cfg, "rope_interleave", False)),
        norm=norm_info(module.kv_a_layernorm))


def _weights(info: MlaInfo, dtype: str) -> tuple[list[Arg], dict[str, str]]:
    qk = info.nope_dim + info.rope_dim
    init = WEIGHT_INIT[info.norm.style]
    args: list[Arg] = []
    params: dict[str, str] = {}
    if info.q_lora_rank:
        args += [Arg("q_a_weight", (str(info.q_lora_rank), "hidden_size"), dtype, "Query down-projection",
                     init="weight", fan_in="hidden_size"),
                 Arg("q_a_norm_weight", (str(info.q_lora_rank),), dtype, "Query latent norm", init=init),
                 Arg("q_b_weight", (str(info.heads * qk), str(info.q_lora_rank)), dtype, "Query up-projection",
                     init="weight", fan_in=str(info.q_lora_rank))]
        params |= {"q_a_weight": "q_a_proj.weight", "q_a_norm_weight": "q_a_layernorm.weight",
                   "q_b_weight": "q_b_proj.weight"}
    else:
        args.append(Arg("q_weight", (str(info.heads * qk), "hidden_size"), dtype, "Query projection",
                        init="weight", fan_in="hidden_size"))
        params["q_weight"] = "q_proj.weight"
    args += [Arg("kv_a_weight", (str(info.kv_lora_rank + info.rope_dim), "hidden_size"), dtype,
                 "Key/value down-projection (latent rows, then the shared RoPE key)", init="weight", fan_in="hidden_size"),
             Arg("kv_a_norm_weight", ("kv_lora_rank",), dtype, "Key/value latent norm", init=init),
             Arg("kv_b_weight", (str(info.heads * (info.nope_dim + info.v_dim)), "kv_lora_rank"), dtype,
                 "Key/value up-projection (per head: no-RoPE key rows, then value rows)", init="weight",
                 fan_in="kv_lora_rank"),
             Arg("o_weight", ("hidden_size", str(info.heads * info.v_dim)), dtype, "Output projection", init="weight",
                 fan_in=str(info.heads * info.v_dim))]
    params |= {"kv_a_weight": "kv_a_proj_with_mqa.weight", "kv_a_norm_weight": "kv_a_layernorm.weight",
               "kv_b_weight": "kv_b_proj.weight", "o_weight": "o_proj.weight"}
    return args, params


def _constants(info: MlaInfo) -> str:
    return "\n".join([f"NUM_HEADS = {info.heads}", f"KV_LORA_RANK = {info.kv_lora_rank}",
                      f"QK_NOPE_DIM = {info.nope_dim}", f"QK_ROPE_DIM = {info.rope_dim}", f"V_HEAD_DIM = {info.v_dim}",
                      f"SCALE = {info.scale!r}"])


def _query_source(info: MlaInfo, x: str) -> list[str]:
    if info.q_lora_rank:
        first = f"q = F.linear({info.norm.call(f'F.linear({x}, q_a_weight)', 'q_a_norm_weight')}, q_b_weight)"
    else:
        first = f"q = F.linear({x}, q_weight)"
    return [first,
            "q = q.view(batch, seq, NUM_HEADS, QK_NOPE_DIM + QK_ROPE_DIM).transpose(1, 2)",
            "q_nope, q_rot = q.split([QK_NOPE_DIM, QK_ROPE_DIM], dim=-1)",
            f"latent, k_rot = F.linear({x}, kv_a_weight).split([KV_LORA_RANK, QK_ROPE_DIM], dim=-1)",
            f"latent = {info.norm.call('latent', 'kv_a_norm_weight')}",
            "k_rot = k_rot.view(batch, 1, seq, QK_ROPE_DIM)",
            "q_rot, k_rot = apply_rope(q_rot, cos, sin), apply_rope(k_rot, cos, sin)",
            "q = torch.cat((q_nope, q_rot), dim=-1)"]


_ATTEND = ["kv_len = latent.shape[1]",
           "kv = F.linear(latent, kv_b_weight).view(batch, kv_len, NUM_HEADS, QK_NOPE_DIM + V_HEAD_DIM).transpose(1, 2)",
           "k_nope, v = kv.split([QK_NOPE_DIM, V_HEAD_DIM], dim=-1)",
           "k = torch.cat((k_nope, k_rot.expand(-1, NUM_HEADS, -1, -1)), dim=-1)",
           "attn = F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=SCALE)",
           "attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * V_HEAD_DIM)",
           "output = F.linear(attn, o_weight)"]


def mla_drafts(info: MlaInfo, module_ref: str, dtype: str = "bfloat16") -> list[Draft]:
    weights, params = _weights(info, dtype)
    rope_helper = INTERLEAVED_ROPE if info.interleaved else ROPE_HELPERS["full"]
    helpers = f"{info.norm.helper}\n\n\n{rope_helper}"
    const_axes = {"hidden_size": ("const", info.hidden, "Model width"), "num_heads": ("const", info.heads, "Heads"),
                  "kv_lora_rank": ("const", info.kv_lora_rank, "Key/value latent width"),
                  "rope_dim": ("const", info.rope_dim, "Shared RoPE key width")}
    rope_init = ("cos", "sin")
    names = ", ".join(["hidden_states", *(a.name for a in weights), "cos", "sin"])
    indent = "\n    "
    prefill = f'''{_constants(info)}


{helpers}


@torch.no_grad()
def run({names}):
    """hidden_states: [batch, seq, hidden]; cos/sin: [batch, seq, rope_dim] -> [batch, seq, hidden]."""
    batch, seq = hidden_states.shape[0], hidden_states.shape[1]
    {indent.join(_query_source(info, "hidden_states"))}
    {indent.join(_ATTEND)}
    return output
'''
    desc = (f"Multi-head latent attention block (hidden {info.hidden}, {info.heads} heads, "
            f"{'query rank ' + str(info.q_lora_rank) + ', ' if info.q_lora_rank else ''}key/value rank "
            f"{info.kv_lora_rank}, head dims {info.nope_dim}+{info.rope_dim} (RoPE) / {info.v_dim} (value)"
            f"{', interleaved RoPE' if info.interleaved else ''})")

    def prefill_call(m, inp):
        out = m(inp["hidden_states"], position_embeddings=(inp["cos"], inp["sin"]), attention_mask=None)
        return {"output": out[0] if isinstance(out, tuple) else out}

    drafts = [Draft(
        name=info.name("prefill"), op_type="attention_block", description=desc + "; causal prefill.",
        axes={"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence")} | const_axes,
        inputs=[Arg("hidden_states", ("batch_size", "seq_len", "hidden_size"), dtype, "Input activations"),
                *weights,
                Arg("cos", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE cosines", init=rope_init[0]),
                Arg("sin", ("batch_size", "seq_len", "rope_dim"), dtype, "RoPE sines", init=rope_init[1])],
        outputs=[Arg("output", ("batch_size", "seq_len", "hidden_size"), dtype, "Block output")],
        code=prefill, shapes="prefill",
        check=Check(module_ref, params, prefill_call, {"batch_size": 2, "seq_len": 7}),
    )]

    dec_names = ", ".join(["hidden_states", *(a.name for a in weights), "cos", "sin", "latent_cache", "rope_cache"])
    decode = f'''{_constants(info)}


{helpers}


@torch.no_grad()
def run({dec_names}):
    """One new token per sequence against the compressed cache.

    hidden_states: [batch, hidden]; cos/sin: [batch, rope_dim] at the new position; latent_cache: [batch, kv_len,
    kv_lora_rank] (normalised latents) and rope_cache: [batch, kv_len, rope_dim] (rotated keys) of the previous
    positions. Returns the output [batch, hidden] and the new token's latent and RoPE key to append."""
    x = hidden_states[:, None, :]
    cos, sin = cos[:, None], sin[:, None]
    batch, seq = x.shape[0], 1
    {indent.join(_query_source(info, "x"))}
    latent_new, rope_new = latent[:, 0], k_rot[:, 0, 0]
    latent = torch.cat((latent_cache, latent), dim=1)
    k_rot = torch.cat((rope_cache[:, None], k_rot), dim=2)
    {indent.join(_ATTEND)}
    return output[:, 0], latent_new, rope_new
'''

    def decode_call(m, inp):
        from transformers import DynamicCache

        cache = DynamicCache()
        cache.update(inp["latent_cache"][:, None], inp["rope_cache"][:, None], m.layer_idx)
        out = m(inp["hidden_states"][:, None], position_embeddings=(inp["cos"][:, None], inp["sin"][:, None]),
                attention_mask=None, past_key_values=cache)
        out = out[0] if isinstance(out, tuple) else out
        layer = cache.layers[m.layer_idx]
        return {"output": out[:, 0], "latent_new": layer.keys[:, 0, -1], "rope_new": layer.values[:, 0, -1]}

    drafts.append(Draft(
        name=info.name("decode"), op_type="attention_block",
        description=desc + "; decode: one new token per sequence against a compressed cache of kv_len positions.",
        axes={"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions before the new token")}
        | const_axes,
        inputs=[Arg("hidden_states", ("batch_size", "hidden_size"), dtype, "New token activations"), *weights,
                Arg("cos", ("batch_size", "rope_dim"), dtype, "RoPE cosines at the new position", init="cos"),
                Arg("sin", ("batch_size", "rope_dim"), dtype, "RoPE sines at the new position", init="sin"),
                Arg("latent_cache", ("batch_size", "kv_len", "kv_lora_rank"), dtype, "Cached normalised latents"),
                Arg("rope_cache", ("batch_size", "kv_len", "rope_dim"), dtype, "Cached rotated RoPE keys")],
        outputs=[Arg("output", ("batch_size", "hidden_size"), dtype, "Block output"),
                 Arg("latent_new", ("batch_size", "kv_lora_rank"), dtype, "New latent to append"),
                 Arg("rope_new", ("batch_size", "rope_dim"), dtype, "New RoPE key to append")],
        code=decode, shapes="decode",
        check=Check(module_ref, params, decode_call, {"batch_size": 2, "kv_len": 11}),
    ))
    return drafts


__all__ = ["MlaInfo", "is_mla", "mla_drafts", "mla_info", "torch"]
