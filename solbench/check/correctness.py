"""Numerical comparison of solution outputs with reference outputs.

Rules, per output (each one has a test in tests/check/test_correctness.py):

1. Shapes must be equal (INCORRECT_SHAPE) and dtypes must be equal (INCORRECT_DTYPE).
2. The reference must be usable: a NaN or +inf anywhere in it, or a -inf without
   `allow_negative_inf`, makes the workload INVALID_REFERENCE. (The published harness failed every
   solution instead, silently; no solution can match such a reference under rules 4-5.)
3. Integer, uint8 and bool outputs are compared exactly: every element must be equal; the
   tolerance (atol, rtol, matched ratio) does not apply. An off-by-one index is wrong, whatever the
   share of such elements. `matched_ratio` still reports the share of equal elements.
4. A NaN anywhere in a float output fails (`has_nan`); so does +inf, and -inf except at positions
   where the reference is -inf too and `allow_negative_inf` is set (`has_inf`); a reference -inf
   must be matched by an output -inf. The matched ratio cannot excuse any of these: non-finite
   values are what unwritten (NaN-prefilled) elements look like.
5. Float outputs are compared in float64 (float64 outputs keep their precision; fp8 goes through
   float32; packed fp4 is unpacked to its values first). An element matches when
   `|out - ref| <= max_atol + max_rtol * |ref|`. The output fails when
   `matched_ratio < required_matched_ratio`, or when `max_error_cap` is set and the largest
   absolute error is strictly greater than it.
6. All-zero outputs: an output that is exactly zero everywhere fails when some reference element
   has `|ref| > max_atol` (zeros are detectably wrong there), even if the matched ratio would let it
   through: an all-zero result is what a kernel that does nothing produces. A reference whose
   elements all lie within atol of zero cannot tell a do-nothing kernel apart; that is left to the
   tolerance and reported as a warning (`OutputComparison.warnings`) so the workload can be fixed.
   (The published rule failed any all-zero output against any nonzero reference, even one of
   magnitude 1e-9 that the tolerance accepts, and reported an L2 norm as the "max error".)
7. `max_relative_error` = max over finite elements of `|out - ref| / max(|ref|, max_atol, 1e-12)`:
   near-zero references do not blow it up, and it stays finite when atol is 0.
8. Reported numbers are finite (JSON has no NaN/Inf): errors are taken over positions where both
   values are finite; `has_nan`/`has_inf` say when others existed.
9. An output whose bytes equal the reference's, where the reference is finite everywhere (the
   reference run as the solution, deterministic kernels), is decided from one pass over each side
   (`_identical`): every error is zero, so rules 4-8 and the numerics flags give the same numbers as
   the full comparison would, at a hundredth of its cost on a CPU.
10. Large tensors are compared in chunks of `CHUNK_ELEMENTS` (`CUDA_CHUNK_ELEMENTS` on a GPU) on
   whatever device they are on. A chunk in which both sides are finite everywhere (the usual case,
   decided by one float64 sum per side) takes a short path with the same results; any NaN or inf
   sends the chunk through the full bookkeeping of rules 4-8.

11. Beyond the official rule, every float output gets the numerics flags of `numerics_flags.py`
   (outliers far beyond the data's magnitude, mismatches concentrated in rows or columns, a systematic
   bias inside the tolerance), computed in the same pass over the chunks (which then never cut a
   row). They are recorded (`Correctness.flags`, `.numerics`) and change no verdict, except under
   `check_outputs(..., strict=True)`, where a flagged output is INCORRECT_NUMERICAL.

`check_outputs` applies this to every output in order; the first failing output decides the
status and is named in `Correctness.output`. `merge_trials` folds several trials into the worst case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from solbench.check import numerics_flags
from solbench.check.numerics_flags import NumericsFindings
from solbench.check.outputs import bytes_equal
from solbench.inputs.fp4 import FP4_DTYPE, unpack_fp4
from solbench.spec import dtypes
from solbench.spec.definition import Definition
from solbench.spec.trace import Correctness, Status
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


def _as_tensor(value, dtype_name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value, dtype=dtypes.torch_dtype(dtype_name) if dtype_name != "float4_e2m1fn_x2" else None)


def _flat(t: torch.Tensor) -> torch.Tensor:
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


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def compare(output, reference, tolerance: Tolerance, dtype_name: str, name: str = "output") -> OutputComparison:
    """Compare one output with its reference under `tolerance` (rules in the module docstring)."""
    dtype_name = dtypes.canonical(dtype_name)
    out, ref = _as_tensor(output, dtype_name), _as_tensor(reference, dtype_name)
    if tuple(out.shape) != tuple(ref.shape):
        return OutputComparison(False, status=Status.INCORRECT_SHAPE, matched_ratio=0.0,
                                message=f"{name}: shape {tuple(out.shape)}, reference {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return OutputComparison(False, status=Status.INCORRECT_DTYPE, matched_ratio=0.0,
                                message=f"{name}: dtype {out.dtype}, reference {ref.dtype}")
    if out.device != ref.device:
        out = out.to(ref.device)
    if dtypes.is_integer_like(dtype_name):
        return _compare_exact(out, ref, name)
    identical = _identical(out, ref, tolerance, name)
    if identical is not None:
        return identical
    return _compare_float(out, ref, tolerance, out.dtype == FP4_DTYPE, name)


IDENTICAL_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _identical(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, name: str) -> OutputComparison | None:
    """The comparison of an output whose bytes equal a finite reference's (rule 9); None otherwise.

    Every error is zero: the matched ratio is 1, the errors 0, and the numerics profile is that of
    a perfect match (no mismatches, no lean). What remains to read from the reference is whether it is
    finite (rule 2) and its largest magnitude (rule 6), both from one min/max pass."""
    if ref.dtype not in IDENTICAL_DTYPES or ref.numel() == 0 or out.dtype != ref.dtype:
        return None
    if tol.max_error_cap is not None and tol.max_error_cap < 0:  # a cap no output meets: the full path says so
        return None
    if not (out.is_contiguous() and ref.is_contiguous()):
        return None  # e.g. a broadcast view of 16 GiB: whole-tensor copies here would not fit beside the inputs
    low, high = (float(v) for v in torch.aminmax(ref.reshape(-1)))  # NaN and inf show in the extremes
    if not (math.isfinite(low) and math.isfinite(high)) or not bytes_equal(out, ref):
        return None
    ref_max_abs = max(-low, high)
    result = OutputComparison(True, numerics=numerics_flags.NumericsFindings())
    if ref_max_abs <= tol.max_atol:
        result.warnings.append(f"{name}: every reference value is within atol ({_fmt(tol.max_atol)}) of zero; "
                               f"the tolerance cannot tell this output from all zeros")
    return result


def _compare_exact(out: torch.Tensor, ref: torch.Tensor, name: str) -> OutputComparison:
    o, r = _flat(out), _flat(ref)
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


def _compare_float(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, packed_fp4: bool,
                   name: str) -> OutputComparison:
    o_all, r_all = _flat(out), _flat(ref)
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
        if _accumulate_finite(s, o, r, base, atol, rtol, scratch):  # its |ref| and mismatch mask are reused
            n = o.numel()
            profile.add_finite(o, r, scratch["r_abs"][:n], scratch["mask"][:n], s.fails - fails_before,
                               spare=(scratch["diff"][:n], scratch["work"][:n]))
        else:
            _accumulate(s, o, r, base, atol, rtol, tol.allow_negative_inf)
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
        result.message = (f"{name}: output is all zeros but the reference reaches |{_fmt(s.ref_max_abs)}| "
                          f"(> atol {_fmt(atol)})")
        return result
    if not s.ref_above_atol:
        result.warnings.append(f"{name}: every reference value is within atol ({_fmt(atol)}) of zero; "
                               f"the tolerance cannot tell this output from all zeros")
    if ratio < tol.required_matched_ratio:
        result.message = (f"{name}: {s.fails} of {s.n} elements ({_fmt(100 * s.fails / s.n)}%) exceed "
                          f"atol {_fmt(atol)} + rtol {_fmt(rtol)}*|ref|; at most "
                          f"{_fmt(100 * (1 - tol.required_matched_ratio))}% may; largest |error| "
                          f"{_fmt(s.max_abs)} at flat index {s.worst_index}")
        return result
    if tol.max_error_cap is not None and s.max_abs > tol.max_error_cap:
        result.message = (f"{name}: largest |error| {_fmt(s.max_abs)} at flat index {s.worst_index} exceeds "
                          f"max_error_cap {_fmt(tol.max_error_cap)}")
        return result
    result.passed, result.status = True, Status.PASSED
    return result


def _accumulate_finite(s: _Stats, o: torch.Tensor, r: torch.Tensor, base: int, atol: float, rtol: float,
                       scratch: dict | None = None) -> bool:
    """`_accumulate` for a chunk where output and reference are finite everywhere; False (nothing
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


def _accumulate(s: _Stats, o: torch.Tensor, r: torch.Tensor, base: int, atol: float, rtol: float,
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


def check_outputs(outputs: Sequence, references: Sequence, definition: Definition, tolerance: Tolerance,
                  axis_values: dict[str, int] | None = None, *, strict: bool = False) -> tuple[Status, Correctness]:
    """Compare every output in definition order; the first failing one decides. With `axis_values`,
    reference outputs are first checked against the declared shapes (INVALID_REFERENCE if off).

    Numerics flags (`numerics_flags.py`) are recorded in `Correctness.flags` / `numerics`; they change
    nothing unless `strict`, where a flagged output is INCORRECT_NUMERICAL like one beyond tolerance."""
    names = list(definition.outputs)
    if len(references) != len(names):
        return Status.INVALID_REFERENCE, Correctness(matched_ratio=0.0, trials=1,
                                                      message=f"reference gave {len(references)} outputs, "
                                                              f"the definition has {len(names)}")
    if len(outputs) != len(names):
        return Status.INCORRECT_SHAPE, Correctness(matched_ratio=0.0, trials=1,
                                                   message=f"expected {len(names)} outputs, got {len(outputs)}")
    shapes = definition.output_shapes(axis_values) if axis_values is not None else {}
    worst = Correctness(trials=1)
    warnings: list[str] = []
    numerics: dict[str, dict] = {}
    flagged: list[str] = []
    for name, out, ref in zip(names, outputs, references):
        spec = definition.outputs[name]
        problem = _reference_problem(name, ref, spec.dtype, None if spec.shape is None else shapes.get(name, "unknown"))
        if problem:
            return Status.INVALID_REFERENCE, Correctness(matched_ratio=0.0, trials=1, output=name, message=problem)
        result = compare(out, ref, tolerance, spec.dtype, name=name)
        warnings.extend(result.warnings)
        found = result.numerics
        if found is not None:
            numerics[name] = found.to_dict()
        worst.max_absolute_error = max(worst.max_absolute_error or 0.0, _finite(result.max_absolute_error))
        worst.max_relative_error = max(worst.max_relative_error or 0.0, _finite(result.max_relative_error))
        worst.matched_ratio = min(worst.matched_ratio, result.matched_ratio)
        worst.has_nan = worst.has_nan or result.has_nan
        worst.has_inf = worst.has_inf or result.has_inf
        if result.passed:  # a failing output's patterns add nothing to its verdict
            worst.flags = _union(worst.flags, found.flags if found else [])
        worst.numerics = numerics or None
        if not result.passed:
            return result.status, Correctness(_finite(result.max_absolute_error), _finite(result.max_relative_error),
                                              result.matched_ratio, result.has_nan, result.has_inf, trials=1,
                                              output=name, message=result.message, flags=list(worst.flags),
                                              numerics=worst.numerics)
        if found is not None and found.flags:
            if strict:
                return Status.INCORRECT_NUMERICAL, Correctness(
                    _finite(result.max_absolute_error), _finite(result.max_relative_error), result.matched_ratio,
                    trials=1, output=name, flags=list(worst.flags), numerics=worst.numerics,
                    message=f"{name}: strict mode fails flagged numerics: {found.describe()}")
            flagged.append(f"{name}: {found.describe()}")
    if flagged:
        warnings.append("numerics flagged (passes the official rules, fails in strict mode): " + "; ".join(flagged))
    if warnings:
        worst.message = "; ".join(warnings)
    return Status.PASSED, worst


def _union(flags: Sequence[str], more: Sequence[str]) -> list[str]:
    """Flag names in the fixed order of `numerics_flags.FLAGS` (unknown names, from newer traces, last)."""
    order = {f: i for i, f in enumerate(numerics_flags.FLAGS)}
    return sorted(set(flags) | set(more), key=lambda f: (order.get(f, len(order)), f))


def _reference_problem(name: str, ref, dtype_name: str, shape) -> str | None:
    if shape is None:
        if isinstance(ref, torch.Tensor) or not isinstance(ref, (int, float, bool)):
            return f"reference output {name!r} should be a Python number, got {type(ref).__name__}"
        return None
    if not isinstance(ref, torch.Tensor):
        return f"reference output {name!r} should be a tensor, got {type(ref).__name__}"
    if ref.dtype != dtypes.torch_dtype(dtype_name):
        return f"reference output {name!r} has dtype {ref.dtype}, the definition declares {dtype_name}"
    if shape != "unknown" and tuple(ref.shape) != tuple(shape):
        return f"reference output {name!r} has shape {tuple(ref.shape)}, the definition resolves it to {tuple(shape)}"
    return None


def _finite(x: float | None) -> float:
    return float(x) if x is not None and math.isfinite(x) else 0.0


def merge_trials(trials: Sequence[Correctness]) -> Correctness:
    """The worst case over trials: largest errors, smallest matched ratio, any NaN/Inf, every numerics
    flag (and per output the worst numbers behind them); the first failing trial's output name and
    message (or, when none failed, every distinct message); trial and checked-iteration counts summed."""
    if not trials:
        return Correctness(trials=0)
    merged = Correctness(trials=0, checked_timed_iterations=0)
    for c in trials:
        merged.flags = _union(merged.flags, c.flags or [])
        for name, found in (c.numerics or {}).items():
            merged.numerics = merged.numerics or {}
            merged.numerics[name] = numerics_flags.merge_findings([merged.numerics.get(name), found])
        merged.max_absolute_error = max(merged.max_absolute_error or 0.0, _finite(c.max_absolute_error))
        merged.max_relative_error = max(merged.max_relative_error or 0.0, _finite(c.max_relative_error))
        merged.matched_ratio = min(merged.matched_ratio, c.matched_ratio)
        merged.has_nan = merged.has_nan or c.has_nan
        merged.has_inf = merged.has_inf or c.has_inf
        merged.trials += max(c.trials, 1)
        merged.checked_timed_iterations += c.checked_timed_iterations
        if merged.output is None and c.output is not None:
            merged.output, merged.message = c.output, c.message
    if merged.message is None:  # no trial failed: every distinct note (warnings, numerics flags), once
        merged.message = "; ".join(dict.fromkeys(c.message for c in trials if c.message)) or None
    return merged
