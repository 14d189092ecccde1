"""The rotary table: RoPE's cos and sin for each position, from the model's base (theta) and head width.

transformers computes the inverse frequencies once, at init (`compute_default_rope_parameters`), into a
non-persistent buffer: derived from the config, never learned or loaded. The table is then built at
every forward. The problem is the two together, as a kernel that builds the table from positions
would do: positions in, cos/sin out. The frequencies are made on the device: a host tensor copied in at
every call cannot be captured in a CUDA graph (0.4 ms a call on an H200). A scaled RoPE whose frequencies
are fixed at init (llama3, yarn, linear) takes them as an input instead (its init is not re-derived here);
one that changes them with the sequence (dynamic, longrope) or splits positions by axis (multimodal RoPE)
is left to the generic capture, and said so.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from solbench.extract.draft import Arg, Check, Draft, fmt_float, name_float
from solbench.spec.errors import SpecError


def rotary_module(model: nn.Module) -> tuple[str, nn.Module] | None:
    """The model's shared rotary module: the first one holding `inv_freq` whose forward is (x, position_ids)."""
    for path, module in model.named_modules():
        if not isinstance(getattr(module, "inv_freq", None), torch.Tensor):
            continue
        params = list(inspect.signature(module.forward).parameters)
        if params == ["x", "position_ids"]:
            return path, module
    return None


def rotary_table_draft(path: str, module: nn.Module, dtype: str = "bfloat16") -> Draft:
    """positions -> (cos, sin) with the inverse frequencies computed from theta, as the module's init does."""
    rope_type = str(getattr(module, "rope_type", "default"))
    params = getattr(module.config, "rope_parameters", None) or {}
    if "dynamic" in rope_type or rope_type == "longrope" or "mrope_section" in params \
            or hasattr(module, "mrope_section"):
        raise SpecError(f"rotary table: RoPE type {rope_type!r} (positions per axis or a table that moves with "
                        f"the sequence) is not templated")
    _check_layout(module)
    if rope_type != "default" or params.get("partial_rotary_factor", 1.0) != 1.0:
        return _from_inv_freq(path, module, dtype)
    theta = float(params["rope_theta"])
    dim = 2 * module.inv_freq.shape[-1]
    scaling = float(getattr(module, "attention_scaling", 1.0))
    max_positions = int(getattr(module.config, "max_position_embeddings", 0) or 8192)
    code = f'''ROPE_THETA = {theta!r}
ATTENTION_SCALING = {scaling!r}


@torch.no_grad()
def run(position_ids):
    """position_ids: [batch, seq] -> cos, sin: [batch, seq, head_dim]."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, {dim}, 2, dtype=torch.int64,
                                                  device=position_ids.device).float() / {dim}))
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * ATTENTION_SCALING
    sin = emb.sin() * ATTENTION_SCALING
    return cos.to(torch.{dtype}), sin.to(torch.{dtype})
'''
    out_dtype = getattr(torch, dtype)

    def call(m, inp):
        inv_freq, _ = m.compute_default_rope_parameters(m.config)  # the module's own init (to_empty left it unset)
        m.inv_freq = inv_freq.to(inp["position_ids"].device)
        cos, sin = m(torch.zeros(1, dtype=out_dtype), inp["position_ids"])
        return {"cos": cos, "sin": sin}

    return Draft(
        name=f"rope_table_d{dim}_theta{int(theta) if theta.is_integer() else name_float(theta)}_p{max_positions}",
        op_type="rope_table",
        description=f"RoPE table: inverse frequencies 1 / theta^(2i/{dim}) for theta {fmt_float(theta)} "
                    f"(computed at init in transformers), times each position, as cos and sin of width {dim}"
                    f"{f' scaled by {fmt_float(scaling)}' if scaling != 1.0 else ''}.",
        axes={"batch_size": ("var", "Sequences"), "seq_len": ("var", "Positions per sequence"),
              "head_dim": ("const", dim, "Width of the cos/sin tables"),
              "max_positions": ("const", max_positions, "Largest position")},
        inputs=[Arg("position_ids", ("batch_size", "seq_len"), "int64", "Positions", init="token_ids",
                    high="max_positions")],
        outputs=[Arg("cos", ("batch_size", "seq_len", "head_dim"), dtype, "cos of each angle"),
                 Arg("sin", ("batch_size", "seq_len", "head_dim"), dtype, "sin of each angle")],
        code=code, shapes="prefill",
        check=Check(f"model:{path}", {}, call, {"batch_size": 2, "seq_len": 7}),
    )


def _check_layout(module: nn.Module) -> None:
    """The table must be the rotate-half layout (angles repeated: width 2 x inv_freq), as the templates
    write it; a module returning one angle per pair (gpt-oss) is left to the generic capture."""
    half = module.inv_freq.shape[-1]
    try:
        with torch.no_grad():
            out = module(torch.empty(1, dtype=torch.bfloat16, device="meta"),
                         torch.zeros(1, 2, dtype=torch.long, device="meta"))
    except Exception:  # noqa: BLE001 - a forward that will not run on meta: validation decides
        return
    if not isinstance(out, tuple | list) or len(out) != 2:  # DeepSeek-V2: one complex table (cos + i sin)
        what = f"one {out.dtype} tensor" if isinstance(out, torch.Tensor) else type(out).__name__
        raise SpecError(f"rotary table: the module returns {what}, not the (cos, sin) pair the template writes")
    cos = out[0]
    if cos.shape[-1] != 2 * half:
        raise SpecError(f"rotary table: the module's table is {cos.shape[-1]} wide, not the rotate-half "
                        f"{2 * half} the template writes")
    if cos.dtype != torch.bfloat16:  # ERNIE 4.5 keeps its table in float32 ("full precision")
        raise SpecError(f"rotary table: the module returns a {cos.dtype} table for bfloat16 activations; the template "
                        f"casts to the activations' dtype")


def _from_inv_freq(path: str, module: nn.Module, dtype: str) -> Draft:
    """A scaled RoPE: its frequencies (the module's buffer, fixed at init) are an input."""
    half = module.inv_freq.shape[-1]
    scaling = float(getattr(module, "attention_scaling", 1.0))
    max_positions = int(getattr(module.config, "max_position_embeddings", 0) or 8192)
    code = f'''ATTENTION_SCALING = {scaling!r}


@torch.no_grad()
def run(position_ids, inv_freq):
    """position_ids: [batch, seq], inv_freq: [head_dim / 2] -> cos, sin: [batch, seq, head_dim]."""
    freqs = position_ids[..., None].float() * inv_freq.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * ATTENTION_SCALING
    sin = emb.sin() * ATTENTION_SCALING
    return cos.to(torch.{dtype}), sin.to(torch.{dtype})
'''
    out_dtype = getattr(torch, dtype)

    def call(m, inp):
        cos, sin = m(torch.zeros(1, dtype=out_dtype), inp["position_ids"])
        return {"cos": cos, "sin": sin}

    rope_type = str(getattr(module, "rope_type", "default"))
    return Draft(
        name=f"rope_table_{rope_type}_d{2 * half}{'_s' + name_float(scaling) if scaling != 1.0 else ''}_p{max_positions}",
        op_type="rope_table",
        description=f"RoPE table ({rope_type}): each position times the inverse frequencies (fixed at init), "
                    f"as cos and sin of width {2 * half}"
                    f"{f' scaled by {fmt_float(scaling)}' if scaling != 1.0 else ''}.",
        axes={"batch_size": ("var", "Sequences"), "seq_len": ("var", "Positions per sequence"),
              "half_dim": ("const", half, "Inverse frequencies"), "head_dim": ("const", 2 * half, "Table width"),
              "max_positions": ("const", max_positions, "Largest position")},
        inputs=[Arg("position_ids", ("batch_size", "seq_len"), "int64", "Positions", init="token_ids",
                    high="max_positions"),
                Arg("inv_freq", ("half_dim",), "float32", "Inverse frequencies (the module's buffer)",
                    init="bias")],
        outputs=[Arg("cos", ("batch_size", "seq_len", "head_dim"), dtype, "cos of each angle"),
                 Arg("sin", ("batch_size", "seq_len", "head_dim"), dtype, "sin of each angle")],
        code=code, shapes="prefill",
        check=Check(f"model:{path}", {"inv_freq": "inv_freq"}, call, {"batch_size": 2, "seq_len": 7}),
    )
