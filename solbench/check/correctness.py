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
   sends the chunk through the full bookkeeping of rules 4-8 (`elementwise.py` compares elements).

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

import torch

from solbench.check import numerics_flags
from solbench.check.elementwise import (
    FP4_DTYPE,
    OutputComparison,
    as_tensor,
    compare_exact,
    compare_float,
    fmt,
)
from solbench.check.outputs import bytes_equal
from solbench.spec import dtypes
from solbench.spec.definition import Definition
from solbench.spec.trace import Correctness, Status
from solbench.spec.workload import Tolerance


def compare(output, reference, tolerance: Tolerance, dtype_name: str, name: str = "output") -> OutputComparison:
    """Compare one output with its reference under `tolerance` (rules in the module docstring)."""
    dtype_name = dtypes.canonical(dtype_name)
    out, ref = as_tensor(output, dtype_name), as_tensor(reference, dtype_name)
    if tuple(out.shape) != tuple(ref.shape):
        return OutputComparison(False, status=Status.INCORRECT_SHAPE, matched_ratio=0.0,
                                message=f"{name}: shape {tuple(out.shape)}, reference {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return OutputComparison(False, status=Status.INCORRECT_DTYPE, matched_ratio=0.0,
                                message=f"{name}: dtype {out.dtype}, reference {ref.dtype}")
    if out.device != ref.device:
        out = out.to(ref.device)
    if dtypes.is_integer_like(dtype_name):
        return compare_exact(out, ref, name)
    identical = _identical(out, ref, tolerance, name)
    if identical is not None:
        return identical
    return compare_float(out, ref, tolerance, out.dtype == FP4_DTYPE, name)


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
        result.warnings.append(f"{name}: every reference value is within atol ({fmt(tol.max_atol)}) of zero; "
                               f"the tolerance cannot tell this output from all zeros")
    return result


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
