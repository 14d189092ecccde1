"""Name/description heuristics: random inputs that look like what the operator really receives.

Plain normal noise makes some operators meaningless (a variance must be positive, a softmax output
sums to one) and, worse, some "realistic" choices are degenerate: a norm weight of exactly 1 lets a
kernel that ignores the weight pass. So every heuristic here is random *and* non-degenerate.

In precedence order (first match wins, `draw.choose`; each is a small function below, each has a test):

| heuristic | applies to | values |
|---|---|---|
| `norm_weight` | float; `*norm*_weight`, `ln*_weight`, `gamma`, or any 1-D `weight`/`*_weight`/`*_gamma` | 1 + 0.2·N(0,1) (never all ones) |
| `norm_bias` | float; `*norm*_bias`, `ln*_bias`, `beta`/`*_beta` | 0.1·N(0,1) (small, nonzero) |
| `causal_mask` | float, ≥2-D; description says "causal", or a ≥3-D `attention_mask`/`causal_mask`/`attn_mask` not described as binary | 0 where key j <= i + (k - q) (bottom-right aligned, at least key 0 visible), the dtype's most negative finite value elsewhere |
| `additive_mask` | float `mask`/`*_mask` described as additive / -inf | 0 (80 %) or most-negative finite; at least one 0 per row |
| `binary_mask` | other float `mask`/`*_mask` | {0, 1}, 80 % ones; at least one 1 per row |
| `bool_mask` | bool `mask`/`*_mask` | fair coin; each row (last dim, length >= 2) holds a True and a False, whichever one means "masked" |
| `rope_table` | float `cos`/`sin` (optionally `rope_`/`freqs_`/`rotary_` prefix, `_cached`/`_emb`/`_table` suffix) | cos/sin of angles U(-π, π); `cos` and `sin` of one shape share their angles (cos²+sin² = 1); the angles are unstructured (no duplicated halves), so a kernel must read the whole table |
| `inv_freq` | float 1-D `inv_freq` | base^(-i/n), base log-uniform in [1e4, 1e6] |
| `positive_stat` | float `rstd`, `std`, `var`, `variance`, `rms`, `invstd` (alone or as a `_` suffix) | |N(0,1)| + 0.1 |
| `quant_scale` | float `*_scale`/`*_scales`/`*_scale_inv`/`*_sf` that is fp8, or described as quantisation/block/scale factors | exp(0.5·N(0,1)) (positive, around 1) |
| `ssm_a_log` | float `A_log` | log U(1, 16) (Mamba initialisation) |
| `ssm_a_cumsum` | float `A_cumsum` | cumulative sum of U(-0.1, 0) along the last dim |
| `ssm_a` | float `A` described as decay / discretised / transition / state | U(-1, -0.001) (a plain `A`, e.g. a GEMM operand, stays normal) |
| `ssm_dt` | float `dt` described as a time step | U(0.001, 0.1) |
| `decay_gate` | float `g` described as a decay | log-sigmoid of N(0,1) (negative) |
| `probabilities` | float `probs`/`probabilities`/`attn_weights`/`attention_weights`/`attn_probs`/`attention_probs`/`routing_weights`/`p_attn`, any input when `op_type == "sampling"` and named `*probs`, or described as a softmax output; never when described as logits / before softmax | softmax of N(0,1) over the last dim (rows sum to 1) |
| `weight_matrix` | float ≥2-D `weight`, `weight<digits>`, `*_weight(s)`, `*_proj(s)`, `*_weight_matrix` (not `grad_*`, not the attention/routing names above, not described as logits) | N(0, 1/fan_in) drawn in the declared dtype (fp8: in float32, then cast); fan_in = prod(shape[1:]) for convolutions, else shape[-1] |
| `position_ids` | integer `position_ids`/`positions`/`pos_ids` | arange along the last dim plus a random offset in [0, 1024) per row |
| `index_like` | integer `*ids`/`*idx`/`*index`/`*indices` | U[0, 1024) (never negative) |

Float heuristics compute in float32 (float64 for float64 inputs) and cast (`weight_matrix` draws in the
declared dtype: one pass, one rounding); fp8 values are clamped to
the finite range first. fp4 inputs never get a heuristic (their codes are already bounded).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from solbench.spec import dtypes


@dataclass(frozen=True)
class InputContext:
    """What a heuristic may look at, and where it draws from."""

    name: str
    dtype_name: str
    shape: tuple[int, ...]
    device: torch.device
    generator: torch.Generator  # this input's private generator
    shared_generator: Callable[[str], torch.Generator]  # same key -> same stream, for values inputs share
    description: str = ""
    op_type: str | None = None

    @property
    def desc(self) -> str:
        return (self.description or "").lower()

    @property
    def is_float(self) -> bool:
        return dtypes.is_floating(self.dtype_name) and self.dtype_name != "float4_e2m1fn_x2"

    @property
    def is_int(self) -> bool:
        return dtypes.canonical(self.dtype_name) in ("int8", "int16", "int32", "int64", "uint8")

    @property
    def work_dtype(self) -> torch.dtype:
        return torch.float64 if self.dtype_name == "float64" else torch.float32


@dataclass(frozen=True)
class Heuristic:
    name: str
    applies: Callable[[InputContext], bool]
    make: Callable[[InputContext], torch.Tensor]  # values in ctx.work_dtype (floats) or the dtype (ints/bool)
    # Writes the values straight into a contiguous tensor of the declared dtype and returns True, or returns
    # False when it cannot for that dtype (then `make` is used). When given, `generate` uses it too, so both
    # ways give the same bits: a multi-GB weight is one pass on the device instead of four and a copy.
    fill: Callable[[InputContext, torch.Tensor], bool] | None = None


# -- drawing helpers ---------------------------------------------------------------------------

def _normal(ctx: InputContext, generator: torch.Generator | None = None) -> torch.Tensor:
    return torch.randn(ctx.shape, dtype=ctx.work_dtype, device=ctx.device, generator=generator or ctx.generator)


def _uniform(ctx: InputContext, low: float, high: float, generator: torch.Generator | None = None) -> torch.Tensor:
    u = torch.rand(ctx.shape, dtype=ctx.work_dtype, device=ctx.device, generator=generator or ctx.generator)
    return u * (high - low) + low


def _mask_names(name: str) -> bool:
    return name == "mask" or name.endswith("_mask")


def _tokens(name: str) -> list[str]:
    return name.lower().split("_")


def _is_norm_token(token: str) -> bool:
    return "norm" in token or re.fullmatch(r"ln\d*", token) is not None


def _finfo_min(ctx: InputContext) -> float:
    return torch.finfo(dtypes.torch_dtype(ctx.dtype_name)).min


def _last_dim_rows_ensure(mask: torch.Tensor, value: bool) -> torch.Tensor:
    """Make every last-dim row contain `value` at least once (sets a random-free position: index 0
    of rows that lack it; index 0 is as good as any, the row is random otherwise)."""
    if mask.dim() == 0 or mask.shape[-1] == 0:
        return mask
    lacking = ~(mask == value).any(dim=-1)
    mask[..., 0] = torch.where(lacking, torch.full_like(mask[..., 0], value), mask[..., 0])
    return mask


# -- the heuristics ----------------------------------------------------------------------------

def _norm_weight_applies(ctx: InputContext) -> bool:
    if not ctx.is_float:
        return False
    tokens = _tokens(ctx.name)
    if tokens[-1] in ("weight", "gamma") and any(_is_norm_token(t) for t in tokens[:-1]):
        return True
    if ctx.name == "gamma":
        return True
    return len(ctx.shape) == 1 and tokens[-1] in ("weight", "gamma") and not ctx.name.startswith("grad")


def norm_weight(ctx: InputContext) -> torch.Tensor:
    """1 + 0.2·N: near the trained regime, yet a kernel that skips the multiply is wrong."""
    return 1.0 + 0.2 * _normal(ctx)


def _norm_bias_applies(ctx: InputContext) -> bool:
    if not ctx.is_float:
        return False
    tokens = _tokens(ctx.name)
    if tokens[-1] == "bias" and any(_is_norm_token(t) for t in tokens[:-1]):
        return True
    return tokens[-1] == "beta" and not ctx.name.startswith("grad")


def norm_bias(ctx: InputContext) -> torch.Tensor:
    """0.1·N: small like a trained bias, nonzero so that skipping the add is wrong."""
    return 0.1 * _normal(ctx)


def _causal_mask_applies(ctx: InputContext) -> bool:
    if not ctx.is_float or len(ctx.shape) < 2:
        return False
    if "causal" in ctx.desc:
        return True
    binary_words = ("binary", "1.0 for", "0.0 for", "{0, 1}", "0 or 1", "valid")
    return (ctx.name in ("attention_mask", "causal_mask", "attn_mask") and len(ctx.shape) >= 3
            and not any(w in ctx.desc for w in binary_words))


def causal_mask(ctx: InputContext) -> torch.Tensor:
    """Additive causal mask; finite (not -inf) so fully masked rows cannot turn into NaN."""
    q, k = ctx.shape[-2], ctx.shape[-1]
    rows = torch.arange(q, device=ctx.device).unsqueeze(-1)
    cols = torch.arange(k, device=ctx.device)
    visible = cols <= (rows + (k - q)).clamp(min=0)
    mask = torch.where(visible, 0.0, _finfo_min(ctx)).to(ctx.work_dtype)
    return mask.expand(ctx.shape).contiguous()


def _additive_mask_applies(ctx: InputContext) -> bool:
    return ctx.is_float and _mask_names(ctx.name) and ("additive" in ctx.desc or "-inf" in ctx.desc)


def additive_mask(ctx: InputContext) -> torch.Tensor:
    keep = _uniform(ctx, 0.0, 1.0) < 0.8
    keep = _last_dim_rows_ensure(keep, True)
    return torch.where(keep, 0.0, _finfo_min(ctx)).to(ctx.work_dtype)


def _binary_mask_applies(ctx: InputContext) -> bool:
    return ctx.is_float and _mask_names(ctx.name)


def binary_mask(ctx: InputContext) -> torch.Tensor:
    keep = _uniform(ctx, 0.0, 1.0) < 0.8
    return _last_dim_rows_ensure(keep, True).to(ctx.work_dtype)


def _bool_mask_applies(ctx: InputContext) -> bool:
    return dtypes.canonical(ctx.dtype_name) == "bool" and _mask_names(ctx.name)


def bool_mask(ctx: InputContext) -> torch.Tensor:
    """Each row gets both values, so whatever True means, no row is all masked (softmax NaN)."""
    mask = torch.randint(0, 2, ctx.shape, dtype=torch.bool, device=ctx.device, generator=ctx.generator)
    if mask.dim() and mask.shape[-1] >= 2:
        mask = _last_dim_rows_ensure(mask, True)
        lacking = ~(~mask).any(dim=-1)
        mask[..., -1] = torch.where(lacking, torch.zeros_like(mask[..., -1]), mask[..., -1])
    return mask


_ROPE = re.compile(r"^(rope_|freqs_|rotary_)?(cos|sin)(_cached|_emb|_embed|_embeddings|_table)?$")


def _rope_table_applies(ctx: InputContext) -> bool:
    return ctx.is_float and _ROPE.match(ctx.name) is not None


def rope_table(ctx: InputContext) -> torch.Tensor:
    """cos/sin of shared angles: the two tables agree (cos² + sin² = 1) like real RoPE tables."""
    shared = ctx.shared_generator(f"rope-angles:{ctx.shape}")
    angles = _uniform(ctx, -math.pi, math.pi, generator=shared)
    return angles.cos() if _ROPE.match(ctx.name).group(2) == "cos" else angles.sin()


def _inv_freq_applies(ctx: InputContext) -> bool:
    return ctx.is_float and ctx.name == "inv_freq" and len(ctx.shape) == 1


def inv_freq(ctx: InputContext) -> torch.Tensor:
    n = ctx.shape[0]
    log_base = math.log(1e4) + float(torch.rand((), generator=ctx.generator, device=ctx.generator.device)) * math.log(100)
    exponents = torch.arange(n, dtype=ctx.work_dtype, device=ctx.device) / max(n, 1)
    return torch.exp(-log_base * exponents)


_STAT = re.compile(r"(^|_)(rstd|std|var|variance|rms|invstd|inv_std|inv_rms)\d*$")


def _positive_stat_applies(ctx: InputContext) -> bool:
    return ctx.is_float and _STAT.search(ctx.name) is not None and not ctx.name.startswith("grad")


def positive_stat(ctx: InputContext) -> torch.Tensor:
    return _normal(ctx).abs() + 0.1


_SCALE = re.compile(r"_(scale|scales|scale_inv|sf)$")


def _quant_scale_applies(ctx: InputContext) -> bool:
    if not ctx.is_float or not ctx.shape or _SCALE.search(ctx.name) is None:
        return False
    words = ("quant", "block", "scale factor", "scaling factor", "dequant")
    return ctx.dtype_name.startswith("float8") or any(w in ctx.desc for w in words)


def quant_scale(ctx: InputContext) -> torch.Tensor:
    return torch.exp(0.5 * _normal(ctx))


def _ssm_a_log_applies(ctx: InputContext) -> bool:
    return ctx.is_float and ctx.name == "A_log"


def ssm_a_log(ctx: InputContext) -> torch.Tensor:
    return torch.log(_uniform(ctx, 1.0, 16.0))


def _ssm_a_cumsum_applies(ctx: InputContext) -> bool:
    return ctx.is_float and ctx.name == "A_cumsum" and len(ctx.shape) >= 1


def ssm_a_cumsum(ctx: InputContext) -> torch.Tensor:
    return torch.cumsum(_uniform(ctx, -0.1, 0.0), dim=-1)


def _ssm_a_applies(ctx: InputContext) -> bool:
    words = ("decay", "discret", "transition", "state", "ssm")
    return ctx.is_float and ctx.name == "A" and any(w in ctx.desc for w in words)


def ssm_a(ctx: InputContext) -> torch.Tensor:
    return _uniform(ctx, -1.0, -0.001)


def _ssm_dt_applies(ctx: InputContext) -> bool:
    return ctx.is_float and ctx.name == "dt" and ("time" in ctx.desc or "step" in ctx.desc)


def ssm_dt(ctx: InputContext) -> torch.Tensor:
    return _uniform(ctx, 0.001, 0.1)


def _decay_gate_applies(ctx: InputContext) -> bool:
    return ctx.is_float and ctx.name == "g" and "decay" in ctx.desc


def decay_gate(ctx: InputContext) -> torch.Tensor:
    return torch.nn.functional.logsigmoid(_normal(ctx))


_PROB_NAMES = ("probs", "probabilities", "attn_weights", "attention_weights", "attn_probs",
               "attention_probs", "routing_weights", "p_attn")


def _probabilities_applies(ctx: InputContext) -> bool:
    if not ctx.is_float or not ctx.shape:
        return False
    if any(w in ctx.desc for w in ("logit", "before softmax", "pre-softmax", "before softcap")):
        return False
    if ctx.name in _PROB_NAMES:
        return True
    if ctx.op_type == "sampling" and ctx.name.endswith("probs"):
        return True
    return "softmax" in ctx.desc and any(w in ctx.desc for w in ("output", "normalized", "probabilit", "after"))


def probabilities(ctx: InputContext) -> torch.Tensor:
    return torch.softmax(_normal(ctx), dim=-1)


_WEIGHT = re.compile(r"(^weight\d*$|_weights?\d*$|_projs?$|_weight_matrix$)")


def _weight_matrix_applies(ctx: InputContext) -> bool:
    return (ctx.is_float and len(ctx.shape) >= 2 and _WEIGHT.search(ctx.name) is not None
            and not ctx.name.startswith("grad") and ctx.name not in _PROB_NAMES and "logit" not in ctx.desc)


def _fan_in(ctx: InputContext) -> int:
    conv = "conv" in ctx.name.lower() or "conv" in ctx.desc
    return max(math.prod(ctx.shape[1:]) if conv and len(ctx.shape) >= 3 else ctx.shape[-1], 1)


def weight_matrix(ctx: InputContext) -> torch.Tensor:
    """Scaled like an initialised layer so activations keep unit scale through deep references."""
    return _normal(ctx) / math.sqrt(_fan_in(ctx))


def fill_weight_matrix(ctx: InputContext, out: torch.Tensor) -> bool:
    """`weight_matrix` drawn in the declared dtype: N(0, 1/fan_in), each value rounded once."""
    if out.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return False  # fp8: drawn in float32, clamped and cast by `generate`
    out.normal_(0.0, 1.0 / math.sqrt(_fan_in(ctx)), generator=ctx.generator)
    return True


def _position_ids_applies(ctx: InputContext) -> bool:
    return ctx.is_int and ctx.name in ("position_ids", "positions", "pos_ids") and len(ctx.shape) >= 1


def position_ids(ctx: InputContext) -> torch.Tensor:
    dtype = dtypes.torch_dtype(ctx.dtype_name)
    steps = torch.arange(ctx.shape[-1], dtype=torch.int64, device=ctx.device)
    offsets = torch.randint(0, 1024, (*ctx.shape[:-1], 1), device=ctx.device, generator=ctx.generator)
    return (steps + offsets).to(dtype)


_INDEX = re.compile(r"(^|_)(ids|idx|index|indices)$")


def _index_like_applies(ctx: InputContext) -> bool:
    return ctx.is_int and _INDEX.search(ctx.name) is not None


def index_like(ctx: InputContext) -> torch.Tensor:
    dtype = dtypes.torch_dtype(ctx.dtype_name)
    high = 128 if dtype == torch.int8 else 1024 if dtype != torch.uint8 else 256
    return torch.randint(0, high, ctx.shape, dtype=dtype, device=ctx.device, generator=ctx.generator)


HEURISTICS: tuple[Heuristic, ...] = (
    Heuristic("norm_weight", _norm_weight_applies, norm_weight),
    Heuristic("norm_bias", _norm_bias_applies, norm_bias),
    Heuristic("causal_mask", _causal_mask_applies, causal_mask),
    Heuristic("additive_mask", _additive_mask_applies, additive_mask),
    Heuristic("binary_mask", _binary_mask_applies, binary_mask),
    Heuristic("bool_mask", _bool_mask_applies, bool_mask),
    Heuristic("rope_table", _rope_table_applies, rope_table),
    Heuristic("inv_freq", _inv_freq_applies, inv_freq),
    Heuristic("positive_stat", _positive_stat_applies, positive_stat),
    Heuristic("quant_scale", _quant_scale_applies, quant_scale),
    Heuristic("ssm_a_log", _ssm_a_log_applies, ssm_a_log),
    Heuristic("ssm_a_cumsum", _ssm_a_cumsum_applies, ssm_a_cumsum),
    Heuristic("ssm_a", _ssm_a_applies, ssm_a),
    Heuristic("ssm_dt", _ssm_dt_applies, ssm_dt),
    Heuristic("decay_gate", _decay_gate_applies, decay_gate),
    Heuristic("probabilities", _probabilities_applies, probabilities),
    Heuristic("weight_matrix", _weight_matrix_applies, weight_matrix, fill_weight_matrix),
    Heuristic("position_ids", _position_ids_applies, position_ids),
    Heuristic("index_like", _index_like_applies, index_like),
)
