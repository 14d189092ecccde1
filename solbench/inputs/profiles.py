"""Input profiles: how much structure the correctness trials' random inputs have.

With plain noise every row of an input has the same statistics, so a kernel that normalises by one
global RMS instead of each row's, or reads one row's scale for all, matches the reference. The
`structured` profile gives plain random floating inputs what real activations have and noise lacks:

| profile | plain random floating inputs (no heuristic applies) |
|---|---|
| `standard` | N(0, 1), as `random_tensors.py` draws them |
| `structured` | N(0, 1) * row scale * column scale, then a few outliers: row scales 2^U(-3, 0.5) (one per row: every index but the last), column scales 2^U(-1, 0.5) (one per position of the last dimension), and about one element in `OUTLIER_EVERY` replaced by ±U(4, 8) times its row's scale |

Magnitudes stay within about 11, like the tails of a large N(0, 1) draw, so nothing a reference does
with plain noise overflows: a K = 16384 fp16 GEMM of two structured operands has entries of a few
thousand, a softmax or an attention score sees values of order 10. Heuristic inputs (masks, indices,
norm weights, probabilities, positive statistics, RoPE tables, ...), fp4 codes, integers, bools,
scalars, safetensors and custom inputs are never changed: structure only rescales values whose
meaning is "any real number".

Which trial uses which (`trial_profile`): trial 0 is `standard` and the others `structured`; a run
with a single trial uses `structured`. Timed inputs always use `standard` (timing measures the
kernel on the plain inputs its speed is compared on).

The profile is part of what determines the inputs: `make_inputs(..., profile=p)` draws every input of
a non-standard profile from `derive_seed(seed, "profile", p)`, so the same (seed, profile) gives the same
inputs in every worker, and two profiles never share values.
"""

from __future__ import annotations

import torch

from solbench.spec import dtypes

STANDARD = "standard"
STRUCTURED = "structured"
PROFILES = (STANDARD, STRUCTURED)
ROW_LOG2_SCALES = (-3.0, 0.5)
COLUMN_LOG2_SCALES = (-1.0, 0.5)
OUTLIER_EVERY = 512
OUTLIER_SIZES = (4.0, 8.0)
_STRUCTURED_DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"input profile must be one of {PROFILES}, got {profile!r}")
    return profile


def trial_profile(trial: int, trials: int) -> str:
    """The profile of correctness trial `trial` (0-based) of `trials`."""
    return STANDARD if trial == 0 and trials > 1 else STRUCTURED


def applies(dtype_name: str, shape: tuple[int, ...]) -> bool:
    """Whether `structured` changes a plain random input of this dtype and shape."""
    return dtypes.canonical(dtype_name) in _STRUCTURED_DTYPES and len(shape) >= 1 and 0 not in shape


def bernoulli_positions(n: int, p: float, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """The positions (int64, ascending) where n independent Bernoulli(p) draws succeed, from geometric gaps
    between successes: the same distribution as one uniform draw per element, at a cost that follows the
    number of successes (a third of a structured input's generation time went to that draw)."""
    found, last = [], -1.0
    while True:
        expected = max(n - 1 - last, 0) * p
        gaps = torch.empty(int(expected + 6 * expected ** 0.5 + 16), dtype=torch.float64, device=device)
        positions = gaps.geometric_(p, generator=generator).cumsum_(0).add_(last)  # gaps >= 1
        found.append(positions[positions < n])
        last = float(positions[-1])
        if last >= n:
            return torch.cat(found).to(torch.int64)


def structured_tensor(shape: tuple[int, ...], dtype_name: str, generator: torch.Generator,
                      device: torch.device) -> torch.Tensor:
    """A plain random floating tensor with row and column scales and a few outliers (table above)."""
    dtype_name = dtypes.canonical(dtype_name)
    dtype = dtypes.torch_dtype(dtype_name)
    work = torch.float64 if dtype_name == "float64" else torch.float32
    shape = tuple(int(s) for s in shape)

    def uniform(size: tuple[int, ...], low: float, high: float) -> torch.Tensor:
        return torch.rand(size, dtype=work, device=device, generator=generator) * (high - low) + low

    values = torch.randn(shape, dtype=work, device=device, generator=generator)
    rows = torch.exp2(uniform((*shape[:-1], 1), *ROW_LOG2_SCALES))
    columns = torch.exp2(uniform((shape[-1],), *COLUMN_LOG2_SCALES))
    values = values.mul_(rows).mul_(columns)
    flat = values.view(-1)
    chosen = bernoulli_positions(flat.numel(), 1.0 / OUTLIER_EVERY, generator, device)
    if chosen.numel():
        sizes = uniform((chosen.numel(),), *OUTLIER_SIZES) * rows.reshape(-1)[chosen // shape[-1]]
        flat[chosen] = torch.where(flat[chosen] < 0, -sizes, sizes)
    if dtype_name.startswith("float8"):
        limit = torch.finfo(dtype).max
        values = values.clamp(-limit, limit)
    return values.to(dtype)
