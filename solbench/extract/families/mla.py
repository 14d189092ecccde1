"""Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key/value paths with a shared RoPE key.

Decode keeps the compressed cache that the model keeps (the normalised latent and the rotated RoPE key),
so the decode problem reads kv_len x (kv_lora_rank + rope_dim) values per sequence, not full keys/values.

Three RoPE layouts occur: rotate-half over cos/sin tables ("full"), DeepSeek-V3's interleaved pairs whose
result lists the rotated first elements, then the second ones ("interleave"), and DeepSeek-V2's complex
multiplication, where each pair (x0, x1) is multiplied by cos + i sin in float32 and stays in place
("complex"; the model passes complex frequencies, the reference takes their float32 real and imaginary parts).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch import nn

from solbench.extract.draft import Arg, Check, Draft, name_float
from solbench.extract.families.attention import ROPE_HELPERS
from solbench.extract.families.norms import WEIGHT_INIT, NormInfo, norm_info
from solbench.spec.errors import SpecError

INTERLEAVED_ROPE = '''def apply_rope(x, cos, sin):
    """Interleaved RoPE: pairs (x0, x1), (x2, x3), ... rotate together and the result lists the rotated first
    elements of every pair, then the second ones. cos/sin: [batch, seq, rope_dim] (halves repeat the angles)."""
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(1)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)'''

COMPLEX_ROPE = '''def apply_rope(x, cos, sin):
    """Complex RoPE: each pair (x0, x1), (x2, x3), ... is the complex number x0 + i x1, multiplied by
    cos + i sin in float32; the rotated pair stays in place. cos/sin: [batch, seq, rope_dim // 2] (float32)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    xf = x.float()
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).to(x.dtype)'''
ROPE_TAGS = {"full": "", "interleave": "_ropeinterleave", "complex": "_ropecomplex"}


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
    rope: str  # "full", "interleave" or "complex" (see the module docstring)
    norm: NormInfo

    @property
    def rope_helper(self) -> str:
        return {"full": ROPE_HELPERS["full"], "interleave": INTERLEAVED_ROPE, "complex": COMPLEX_ROPE}[self.rope]

    def rope_args(self, dtype: str, decode: bool = False) -> list[Arg]:
        """cos/sin inputs: [batch, seq, width] for prefill, [batch, width] at the new position for decode."""
        lead = ("batch_size",) if decode else ("batch_size", "seq_len")
        where = " at the new position" if decode else ""
        if self.rope == "complex":
            return [Arg("cos", (*lead, "rope_pairs"), "float32", f"Real parts of the RoPE frequencies{where}",
                        init="cos_half"),
                    Arg("sin", (*lead, "rope_pairs"), "float32", f"Imaginary parts of the RoPE frequencies{where}",
                        init="sin_half")]
        return [Arg("cos", (*lead, "rope_dim"), dtype, f"RoPE cosines{where}", init="cos"),
                Arg("sin", (*lead, "rope_dim"), dtype, f"RoPE sines{where}", init="sin")]

    def const_axes(self) -> dict[str, tuple]:
        axes = {"hidden_size": ("const", self.hidden, "Model width"), "num_heads": ("const", self.heads, "Heads"),
                "kv_lora_rank": ("const", self.kv_lora_rank, "Key/value latent width"),
                "rope_dim": ("const", self.rope_dim, "Shared RoPE key width")}
        if self.rope == "complex":
            axes["rope_pairs"] = ("const", self.rope_dim // 2, "Rotated pairs (width of the frequency tables)")
        return axes

    def position_embeddings(self, cos, sin):
        """What the transformers module takes for these tables."""
        return torch.complex(cos, sin) if self.rope == "complex" else (cos, sin)

    def name(self, phase: str) -> str:
        q = f"qr{self.q_lora_rank}" if self.q_lora_rank else "qfull"
        return (f"mla_attention_block_{phase}_hs{self.hidden}_h{self.heads}_{q}_kvr{self.kv_lora_rank}"
                f"_nope{self.nope_dim}_rope{self.rope_dim}_v{self.v_dim}{ROPE_TAGS[self.rope]}"
                f"_scale{name_float(self.scale)}")


def is_mla(module: nn.Module) -> bool:
    return hasattr(module, "kv_a_proj_with_mqa") and hasattr(module, "kv_b_proj")


def rope_style(module: nn.Module, hf_cfg) -> str:
    """Which rotation the module's own code applies: its modeling file has either the (cos, sin) helper or
    the complex one (DeepSeek-V2's `apply_rotary_emb`, probed to make sure it is the complex product)."""
    namespace = sys.modules[type(module).__module__]
    if hasattr(namespace, "apply_rotary_pos_emb"):
        return "interleave" if getattr(hf_cfg, "rope_interleave", False) else "full"
    apply = getattr(namespace, "apply_rotary_emb", None)
    if apply is not None:
        x = torch.randn(1, 1, 2, 4)
        angles = torch.tensor([[[0.5, 1.0], [2.0, 3.0]]])
        out, _ = apply(x, x, torch.polar(torch.ones_like(angles), angles))
        pairs = torch.view_as_complex(x.reshape(1, 1, 2, 2, 2)) * torch.polar(torch.ones_like(angles), angles)
        if torch.allclose(out, torch.view_as_real(pairs).flatten(3)):
            return "complex"
    raise SpecError(f"{type(module).__name__}: unknown RoPE layout")


def mla_info(module: nn.Module, hf_cfg) -> MlaInfo:
    return MlaInfo(
        hidden=module.hidden_size, heads=module.num_heads, q_lora_rank=module.q_lora_rank,
        kv_lora_rank=module.kv_lora_rank, nope_dim=module.qk_nope_head_dim, rope_dim=module.qk_rope_head_dim,
        v_dim=module.v_head_dim, scale=float(module.scaling), rope=rope_style(module, hf_cfg),
        norm=norm_info(module.kv_a_layernorm))


def weights(info: MlaInfo, dtype: str, prefix: str = "") -> tuple[list[Arg], dict[str, str]]:
    """Weights of the block (reference input -> parameter path in the attention module)."""
    p = prefix
    qk = info.nope_dim + info.rope_dim
    init = WEIGHT_INIT[info.norm.style]
    args: list[Arg] = []
    params: dict[str, str] = {}
    if info.q_lora_rank:
        args += [Arg(f"{p}q_a_weight", (str(info.q_lora_rank), "hidden_size"), dtype, "Query down-projection",
                     init="weight", fan_in="hidden_size"),
                 Arg(f"{p}q_a_norm_weight", (str(info.q_lora_rank),), dtype, "Query latent norm", init=init),
                 Arg(f"{p}q_b_weight", (str(info.heads * qk), str(info.q_lora_rank)), dtype, "Query up-projection",
                     init="weight", fan_in=str(info.q_lora_rank))]
        params |= {f"{p}q_a_weight": "q_a_proj.weight", f"{p}q_a_norm_weight": "q_a_layernorm.weight",
                   f"{p}q_b_weight": "q_b_proj.weight"}
    else:
        args.append(Arg(f"{p}q_weight", (str(info.heads * qk), "hidden_size"), dtype, "Query projection",
                        init="weight", fan_in="hidden_size"))
        params[f"{p}q_weight"] = "q_proj.weight"
    args += [Arg(f"{p}kv_a_weight", (str(info.kv_lora_rank + info.rope_dim), "hidden_size"), dtype,
                 "Key/value down-projection (latent rows, then the shared RoPE key)", init="weight", fan_in="hidden_size"),
             Arg(f"{p}kv_a_norm_weight", ("kv_lora_rank",), dtype, "Key/value latent norm", init=init),
             Arg(f"{p}kv_b_weight", (str(info.heads * (info.nope_dim + info.v_dim)), "kv_lora_rank"), dtype,
                 "Key/value up-projection (per head: no-RoPE key rows, then value rows)", init="weight",
                 fan_in="kv_lora_rank"),
             Arg(f"{p}o_weight", ("hidden_size", str(info.heads * info.v_dim)), dtype, "Output projection",
                 init="weight", fan_in=str(info.heads * info.v_dim))]
    params |= {f"{p}kv_a_weight": "kv_a_proj_with_mqa.weight", f"{p}kv_a_norm_weight": "kv_a_layernorm.weight",
               f"{p}kv_b_weight": "kv_b_proj.weight", f"{p}o_weight": "o_proj.weight"}
    return args, params


def constants(info: MlaInfo) -> str:
    return "\n".join([f"NUM_HEADS = {info.heads}", f"KV_LORA_RANK = {info.kv_lora_rank}",
                      f"QK_NOPE_DIM = {info.nope_dim}", f"QK_ROPE_DIM = {info.rope_dim}", f"V_HEAD_DIM = {info.v_dim}",
                      f"SCALE = {info.scale!r}"])


def query_source(info: MlaInfo, x: str, p: str = "") -> list[str]:
    """Lines computing q (all heads, RoPE applied), the normalised `latent` and the rotated `k_rot` from `x`;
    `batch` and `seq` must be set."""
    if info.q_lora_rank:
        first = f"q = F.linear({info.norm.call(f'F.linear({x}, {p}q_a_weight)', f'{p}q_a_norm_weight')}, {p}q_b_weight)"
    else:
        first = f"q = F.linear({x}, {p}q_weight)"
    return [first,
            "q = q.view(batch, seq, NUM_HEADS, QK_NOPE_DIM + QK_ROPE_DIM).transpose(1, 2)",
            "q_nope, q_rot = q.split([QK_NOPE_DIM, QK_ROPE_DIM], dim=-1)",
            f"latent, k_rot = F.linear({x}, {p}kv_a_weight).split([KV_LORA_RANK, QK_ROPE_DIM], dim=-1)",
            f"latent = {info.norm.call('latent', f'{p}kv_a_norm_weight')}",
            "k_rot = k_rot.view(batch, 1, seq, QK_ROPE_DIM)",
            "q_rot, k_rot = apply_rope(q_rot, cos, sin), apply_rope(k_rot, cos, sin)",
            "q = torch.cat((q_nope, q_rot), dim=-1)"]


# the new token's cache entries, then the cache with them appended (decode)
APPEND = ["latent_new, rope_new = latent[:, 0], k_rot[:, 0, 0]",
          "latent = torch.cat((latent_cache, latent), dim=1)",
          "k_rot = torch.cat((rope_cache[:, None], k_rot), dim=2)"]


def attend_source(p: str = "", out: str = "output") -> list[str]:
    """Lines expanding the latents to keys and values, attending and projecting into `out`."""
    return ["kv_len = latent.shape[1]",
            f"kv = F.linear(latent, {p}kv_b_weight).view(batch, kv_len, NUM_HEADS, QK_NOPE_DIM + V_HEAD_DIM)"
            ".transpose(1, 2)",
            "k_nope, v = kv.split([QK_NOPE_DIM, V_HEAD_DIM], dim=-1)",
            "k = torch.cat((k_nope, k_rot.expand(-1, NUM_HEADS, -1, -1)), dim=-1)",
            "attn = F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=SCALE)",
            "attn = attn.transpose(1, 2).reshape(batch, seq, NUM_HEADS * V_HEAD_DIM)",
            f"{out} = F.linear(attn, {p}o_weight)"]


def cache_args(dtype: str) -> list[Arg]:
    return [Arg("latent_cache", ("batch_size", "kv_len", "kv_lora_rank"), dtype, "Cached normalised latents"),
            Arg("rope_cache", ("batch_size", "kv_len", "rope_dim"), dtype, "Cached rotated RoPE keys")]


def cache_outputs(dtype: str) -> list[Arg]:
    return [Arg("latent_new", ("batch_size", "kv_lora_rank"), dtype, "New latent to append"),
            Arg("rope_new", ("batch_size", "rope_dim"), dtype, "New RoPE key to append")]


def module_cache(inp: dict, layer_idx: int):
    """A transformers cache holding the compressed cache of `inp` (the model's own layout)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.update(inp["latent_cache"][:, None], inp["rope_cache"][:, None], layer_idx)
    return cache


def cache_news(cache, layer_idx: int) -> dict:
    layer = cache.layers[layer_idx]
    return {"latent_new": layer.keys[:, 0, -1], "rope_new": layer.values[:, 0, -1]}


def description(info: MlaInfo) -> str:
    rope = {"full": "", "interleave": ", interleaved RoPE",
            "complex": ", RoPE as a complex product with float32 frequencies"}[info.rope]
    return (f"hidden {info.hidden}, {info.heads} heads, "
            f"{'query rank ' + str(info.q_lora_rank) + ', ' if info.q_lora_rank else ''}key/value rank "
            f"{info.kv_lora_rank}, head dims {info.nope_dim}+{info.rope_dim} (RoPE) / {info.v_dim} (value){rope}")


def _mla_prefill_draft(info: MlaInfo, module_ref: str, dtype: str, args: list[Arg], params: dict) -> Draft:
    names = ", ".join(["hidden_states", *(a.name for a in args), "cos", "sin"])
    indent = "\n    "
    table = "rope_pairs" if info.rope == "complex" else "rope_dim"
    prefill = f'''{constants(info)}


{info.norm.helper}


{info.rope_helper}


@torch.no_grad()
def run({names}):
    """hidden_states: [batch, seq, hidden]; cos/sin: [batch, seq, {table}] -> [batch, seq, hidden]."""
    batch, seq = hidden_states.shape[0], hidden_states.shape[1]
    {indent.join(query_source(info, "hidden_states"))}
    {indent.join(attend_source())}
    return output
'''

    def prefill_call(m, inp):
        out = m(inp["hidden_states"], position_embeddings=info.position_embeddings(inp["cos"], inp["sin"]),
                attention_mask=None)
        return {"output": out[0] if isinstance(out, tuple) else out}

    return Draft(
        name=info.name("prefill"), op_type="attention_block",
        description=f"Multi-head latent attention block ({description(info)}); causal prefill.",
        axes={"batch_size": ("var", "Sequences"), "seq_len": ("var", "Tokens per sequence")} | info.const_axes(),
        inputs=[Arg("hidden_states", ("batch_size", "seq_len", "hidden_size"), dtype, "Input activations"),
                *args, *info.rope_args(dtype)],
        outputs=[Arg("output", ("batch_size", "seq_len", "hidden_size"), dtype, "Block output")],
        code=prefill, shapes="prefill",
        check=Check(module_ref, params, prefill_call, {"batch_size": 2, "seq_len": 7}),
    )


def _mla_decode_draft(info: MlaInfo, module_ref: str, dtype: str, args: list[Arg], params: dict) -> Draft:
    dec_names = ", ".join(["hidden_states", *(a.name for a in args), "cos", "sin", "latent_cache", "rope_cache"])
    indent = "\n    "
    table = "rope_pairs" if info.rope == "complex" else "rope_dim"
    decode = f'''{constants(info)}


{info.norm.helper}


{info.rope_helper}


@torch.no_grad()
def run({dec_names}):
    """One new token per sequence against the compressed cache.

    hidden_states: [batch, hidden]; cos/sin: [batch, {table}] at the new position; latent_cache: [batch, kv_len,
    kv_lora_rank] (normalised latents) and rope_cache: [batch, kv_len, rope_dim] (rotated keys) of the previous
    positions. Returns the output [batch, hidden] and the new token's latent and RoPE key to append."""
    x = hidden_states[:, None, :]
    cos, sin = cos[:, None], sin[:, None]
    batch, seq = x.shape[0], 1
    {indent.join(query_source(info, "x"))}
    {indent.join(APPEND)}
    {indent.join(attend_source())}
    return output[:, 0], latent_new, rope_new
'''

    def decode_call(m, inp):
        cache = module_cache(inp, m.layer_idx)
        out = m(inp["hidden_states"][:, None],
                position_embeddings=info.position_embeddings(inp["cos"][:, None], inp["sin"][:, None]),
                attention_mask=None, past_key_values=cache)
        out = out[0] if isinstance(out, tuple) else out
        return {"output": out[:, 0]} | cache_news(cache, m.layer_idx)

    return Draft(
        name=info.name("decode"), op_type="attention_block",
        description=f"Multi-head latent attention block ({description(info)}); decode: one new token per sequence "
                    f"against a compressed cache of kv_len positions.",
        axes={"batch_size": ("var", "Sequences"), "kv_len": ("var", "Cached positions before the new token")}
        | info.const_axes(),
        inputs=[Arg("hidden_states", ("batch_size", "hidden_size"), dtype, "New token activations"), *args,
                *info.rope_args(dtype, decode=True), *cache_args(dtype)],
        outputs=[Arg("output", ("batch_size", "hidden_size"), dtype, "Block output"), *cache_outputs(dtype)],
        code=decode, shapes="decode",
        check=Check(module_ref, params, decode_call, {"batch_size": 2, "kv_len": 11}),
    )


def mla_drafts(info: MlaInfo, module_ref: str, dtype: str = "bfloat16") -> list[Draft]:
    """The MLA block, prefill and decode (against the compressed cache of latents and RoPE keys)."""
    args, params = weights(info, dtype)
    return [_mla_prefill_draft(info, module_ref, dtype, args, params),
            _mla_decode_draft(info, module_ref, dtype, args, params)]

__all__ = ["MlaInfo", "is_mla", "mla_drafts", "mla_info", "torch"]
