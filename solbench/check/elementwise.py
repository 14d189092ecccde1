"""Element-by-element comparison of one output with its reference: exact for integers, in float64 chunks
for floats (rules 3-8 and 10-11 of `solbench.check.correctness`, which decides which applies).

The float comparison is one pass over chunks of both tensors, with the numerics flags' profile fed
from the same chunks; a chunk that is finite everywhere takes a shorter path with the same results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from solbench.check import numerics_flags
from solbench.check.numerics_flags import NumericsFindings
from solbench.inputs.fp4 import FP4_DTYPE, unpack_fp4
from solbench.spec import dtypes
from solbench.spec.trace import Status
from solbench.spec.workload import Tolerance

CHUNK_ELEMENTS = 1 << 20  # float64 temporaries of a chunk stay around 100 MB
CUDA_CHUNK_ELEMENTS = 1 << 24  # on a GPU: fewer launches and host syncs (temporaries about 1 GB)
REL_FLOOR = 1e-12


@dataclass
class OutputComparison:
    passed: bool
    max_absolute_error: float = 0.0
    max_relative_error: float = 0.0
    matched_ratio: float = 1.0
    has_nan: bool = False
    has_inf: bool = False
    message: str = ""
    status: Status = Status.PASSED
    warnings: list[str] = field(default_factory=list)
    numerics: NumericsFindings | None = None  # float outputs: the flags beyond the official rule


def as_tensor(value, dtype_name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value, dtype=dtypes.torch_dtype(dtype_name) if dtype_name != "float4_e2m1fn_x2" else None)


def flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view (copy only when non-contiguous); fp4 as raw bytes."""
    if t.dtype == FP4_DTYPE:
        t = t.view(torch.uint8)
    return t.reshape(-1)


def _values(chunk: torch.Tensor, packed_fp4: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """The chunk's values in float64 (written into `out`, a float64 buffer at least as long, when given)."""
    if packed_fp4:
        return unpack_fp4(chunk).to(torch.float64)
    if chunk.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return chunk.to(torch.float32).to(torch.float64)
    if out is None or chunk.dtype == torch.float64:
        return chunk.to(torch.float64)
    return out[:chunk.numel()].copy_(chunk)


def _chunk_elements(t: torch.Tensor) -> int:
    return CUDA_CHUNK_ELEMENTS if t.device.type == "cuda" else CHUNK_ELEMENTS


def fmt(x: float) -> str:
    return f"{x:.4g}"


def compare_exact(out: torch.Tensor, ref: torch.Tensor, name: str) -> OutputComparison:
    o, r = flat(out), flat(ref)
    n = o.numel()
    if n == 0:
        return OutputComparison(True)
    mismatches, max_abs, first = 0, 0.0, None
    step = _chunk_elements(o)
    for start in range(0, n, step):
        oc, rc = o[start:start + step], r[start:start + step]
        differ = oc != rc
        count = int(torch.count_nonzero(differ))
        if count:
            mismatches += count
            if first is None:
                first = start + int(differ.nonzero()[0, 0])
            diff = (oc.to(torch.float64) - rc.to(torch.float64)).abs()
            max_abs = max(max_abs, float(diff.max()))
    ratio = 1.0 - mismatches / n
    if mismatches == 0:
        return OutputComparison(True, matched_ratio=1.0)
    o_first, r_first = o[first].item(), r[first].item()
    message = (f"{name}: {mismatches} of {n} elements differ (integer/bool outputs must match exactly); "
               f"first at flat index {first}: got {o_first}, expected {r_first}")
    return OutputComparison(False, max_absolute_error=max_abs, max_relative_error=_rel(max_abs, abs(r_first), 0.0),
                            matched_ratio=ratio, message=message, status=Status.INCORRECT_NUMERICAL)


def _rel(abs_err: float, ref_abs: float, atol: float) -> float:
    return abs_err / max(ref_abs, atol, REL_FLOOR)


@dataclass
class _Stats:
    n: int = 0
    fails: int = 0
    max_abs: float = 0.0
    worst_index: int = -1
    max_rel: float = 0.0
    out_nan: int = 0
    out_bad_inf: int = 0
    ref_nan: int = 0
    ref_pos_inf: int = 0
    ref_neg_inf: int = 0
    ref_neg_inf_missed: int = 0
    out_nonzero: bool = False
    ref_above_atol: bool = False
    ref_max_abs: float = 0.0


def compare_float(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, packed_fp4: bool,
                   name: str) -> OutputComparison:
    o_all, r_all = flat(out), flat(ref)
    atol, rtol = tol.max_atol, tol.max_rtol
    s = _Stats()
    chunk = _chunk_elements(o_all)
    step = chunk // 2 if packed_fp4 else chunk
    scratch: dict = {}
    o_buf = r_buf = None
    if not packed_fp4 and o_all.dtype != torch.float64 and o_all.numel() > 0:
        o_buf = torch.empty(min(step, o_all.numel()), dtype=torch.float64, device=o_all.device)
        r_buf = torch.empty_like(o_buf)
    line = numerics_flags.line_length(tuple(out.shape), packed_fp4)
    profile = numerics_flags.ErrorProfile(line, atol, rtol, numerics_flags.unit_roundoff(out.dtype, packed_fp4))
    for start, end in numerics_flags.chunk_ranges(o_all.numel(), step, line // 2 if packed_fp4 else line):
        o = _values(o_all[start:end], packed_fp4, o_buf)
        r = _values(r_all[start:end], packed_fp4, r_buf)
        base = start * 2 if packed_fp4 else start
        fails_before = s.fails
        if accumulate_finite(s, o, r, base, atol, rtol, scratch):  # its |ref| and mismatch mask are reused
            n = o.numel()
            profile.add_finite(o, r, scratch["r_abs"][:n], scratch["mask"][:n], s.fails - fails_before,
                               spare=(scratch["diff"][:n], scratch["work"][:n]))
        else:
            accumulate(s, o, r, base, atol, rtol, tol.allow_negative_inf)
            profile.add(o, r)
    if s.n == 0:
        return OutputComparison(True)

    ratio = max(0.0, min(1.0, 1.0 - s.fails / s.n))
    result = OutputComparison(False, max_absolute_error=s.max_abs, max_relative_error=s.max_rel,
                              matched_ratio=ratio, has_nan=s.out_nan > 0, has_inf=s.out_bad_inf > 0,
                              status=Status.INCORRECT_NUMERICAL, numerics=profile.finish())
    if s.ref_nan or s.ref_pos_inf or (s.ref_neg_inf and not tol.allow_negative_inf):
        parts = [f"{c} {w}" for c, w in ((s.ref_nan, "NaN"), (s.ref_pos_inf, "+inf"),
                                         (s.ref_neg_inf if not tol.allow_negative_inf else 0, "-inf")) if c]
        hint = " (set allow_negative_inf if -inf is intended)" if s.ref_neg_inf and not tol.allow_negative_inf else ""
        result.status = Status.INVALID_REFERENCE
        result.message = f"{name}: the reference output has {', '.join(parts)} values{hint}"
        return result
    if s.out_nan:
        result.message = f"{name}: {s.out_nan} NaN values in the output (unwritten or invalid elements)"
        return result
    if s.out_bad_inf:
        result.message = f"{name}: {s.out_bad_inf} infinite values in the output where the reference has none"
        return result
    if s.ref_neg_inf_missed:
        result.message = f"{name}: {s.ref_neg_inf_missed} positions where the reference is -inf and the output is not"
        return result
    if not s.out_nonzero and s.ref_above_atol:
        result.message = (f"{name}: output is all zeros but the reference reaches |{fmt(s.ref_max_abs)}| "
                          f"(> atol {fmt(atol)})")
        return result
    if not s.ref_above_atol:
        result.warnings.append(f"{name}: every reference value is within atol ({fmt(atol)}) of zero; "
                               f"the tolerance cannot tell this output from all zeros")
    if ratio < tol.required_matched_ratio:
        result.message = (f"{name}: {s.fails} of {s.n} elements ({fmt(100 * s.fails / s.n)}%) exceed "
                          f"atol {fmt(atol)} + rtol {fmt(rtol)}*|ref|; at most "
                          f"{fmt(100 * (1 - tol.required_matched_ratio))}% may; largest |error| "
                          f"{fmt(s.max_abs)} at flat index {s.worst_index}")
        return result
    if tol.max_error_cap is not None and s.max_abs > tol.max_error_cap:
        result.message = (f"{name}: largest |error| {fmt(s.max_abs)} at flat index {s.worst_index} exceeds "
                          f"max_error_cap {fmt(tol.max_error_cap)}")
        return result
    result.passed, result.status = True, Status.PASSED
    return result


def accumulate_finite(s: _Stats, o: torch.Tensor, r: torch.Tensor, base: int, atol: float, rtol: float,
                       scratch: dict | None = None) -> bool:
    """`accumulate` for a chunk where output and reference are finite everywhere; False (nothing
    recorded) when they are not.

    With no NaN or inf, the masks of the general path are all-true or all-false, so the same numbers
    come from about a third of the passes over the chunk, into buffers reused across chunks
    (`scratch`), with one host sync instead of a dozen: `ok` is `diff <= atol + rtol * |ref|`, and
    "some |ref| > atol" is "max |ref| > atol".
    """
    n = o.numel()
    if n == 0:
        return False
    # A float64 sum is finite only if every term is (values cannot overflow it unless they are within a
    # factor of numel of float64's largest; such chunks take the general path, which is also right).
    if not bool(torch.isfinite(torch.stack((o.sum(), r.sum()))).all()):
        return False
    scratch = {} if scratch is None else scratch
    if scratch.get("size", 0) < n or scratch["diff"].device != o.device:
        scratch.update(size=n, diff=torch.empty(n, dtype=torch.float64, device=o.device),
                       r_abs=torch.empty(n, dtype=torch.float64, device=o.device),
                       work=torch.empty(n, dtype=torch.float64, device=o.device),
                       mask=torch.empty(n, dtype=torch.bool, device=o.device))
    diff, r_abs, work, mask = (scratch[k][:n] for k in ("diff", "r_abs", "work", "mask"))
    torch.sub(o, r, out=diff).abs_()
    torch.abs(r, out=r_abs)
    torch.mul(r_abs, rtol, out=work)
    work += atol
    fails = torch.count_nonzero(torch.gt(diff, work, out=mask))
    value = diff.max()
    torch.clamp(r_abs, min=max(atol, REL_FLOOR), out=work)
    rel = torch.div(diff, work, out=work).max()
    o_nonzero = o.any() if not s.out_nonzero else torch.ones((), dtype=torch.bool, device=o.device)
    fails_n, value, max_rel, ref_max, nonzero = torch.stack(
        (fails.to(torch.float64), value, rel, r_abs.max(), o_nonzero.to(torch.float64))).tolist()
    s.n += n
    s.fails += int(fails_n)
    if s.worst_index < 0 or value > s.max_abs:  # the first position of the largest error, as argmax gives
        s.max_abs, s.worst_index = value, base + int(diff.argmax())
    s.max_rel = max(s.max_rel, max_rel)
    s.ref_max_abs = max(s.ref_max_abs, ref_max)
    s.out_nonzero = s.out_nonzero or nonzero != 0
    s.ref_above_atol = s.ref_above_atol or ref_max > atol
    return True


def accumulate(s: _Stats, o: torch.Tensor, r: torch.Tensor, base: int, atol: float, rtol: float,
                allow_negative_inf: bool) -> None:
    s.n += o.numel()
    o_nan, r_nan = torch.isnan(o), torch.isnan(r)
    o_fin, r_fin = torch.isfinite(o), torch.isfinite(r)
    r_neg_inf = r == -math.inf
    joint_neg_inf = (o == -math.inf) & r_neg_inf if allow_negative_inf else torch.zeros_like(o_nan)
    s.out_nan += int(o_nan.sum())
    s.out_bad_inf += int((torch.isinf(o) & ~joint_neg_inf).sum())
    s.ref_nan += int(r_nan.sum())
    s.ref_pos_inf += int((r == math.inf).sum())
    s.ref_neg_inf += int(r_neg_inf.sum())
    s.ref_neg_inf_missed += int((r_neg_inf & ~joint_neg_inf).sum())
    both = o_fin & r_fin
    diff = torch.where(both, (o - r).abs(), torch.zeros_like(o))
    r_abs = torch.where(r_fin, r.abs(), torch.zeros_like(r))
    ok = (both & (diff <= atol + rtol * r_abs)) | joint_neg_inf
    s.fails += int((~ok).sum())
    if diff.numel():
        index = int(diff.argmax())
        value = float(diff[index])
        if s.worst_index < 0 or value > s.max_abs:
            s.max_abs, s.worst_index = value, base + index
        s.max_rel = max(s.max_rel, float((diff / r_abs.clamp(min=max(atol, REL_FLOOR))).max()))
        s.ref_max_abs = max(s.ref_max_abs, float(r_abs.max()))
    s.out_nonzero = s.out_nonzero or bool((o != 0).any())
    s.ref_above_atol = s.ref_above_atol or bool((r_abs > atol).any())
