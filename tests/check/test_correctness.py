import json
import math

import pytest
import torch

from solbench.check import correctness, elementwise
from solbench.check.correctness import check_outputs, compare, merge_trials
from solbench.inputs import allocate_outputs
from solbench.inputs.fp4 import pack_codes
from solbench.spec import dtypes
from solbench.spec.trace import Correctness, Status
from solbench.spec.workload import Tolerance
from tests.check.check_builders import build_definition

TOL = Tolerance(max_atol=1e-2, max_rtol=1e-2, required_matched_ratio=1.0)


def ref_and_out(n=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, generator=g, dtype=torch.float64) + 3.0  # magnitudes well above atol
    return ref, ref.clone()


# -- shape / dtype ------------------------------------------------------------------------------

def test_shape_mismatch():
    r = compare(torch.zeros(3), torch.zeros(4), TOL, "float32")
    assert not r.passed and r.status == Status.INCORRECT_SHAPE


def test_dtype_mismatch():
    r = compare(torch.zeros(4, dtype=torch.float16), torch.zeros(4), TOL, "float32")
    assert not r.passed and r.status == Status.INCORRECT_DTYPE


def test_identical_outputs_pass():
    ref, out = ref_and_out()
    r = compare(out, ref, TOL, "float64")
    assert r.passed and r.max_absolute_error == 0 and r.matched_ratio == 1.0 and r.status == Status.PASSED


# -- atol / rtol / matched ratio / cap ------------------------------------------------------------

def test_atol_boundary_inclusive():
    tol = Tolerance(max_atol=0.5, max_rtol=0.0, required_matched_ratio=1.0)
    ref = torch.zeros(4, dtype=torch.float64)
    assert compare(ref + 0.5, ref, tol, "float64").passed
    assert not compare(ref + 0.5 + 1e-9, ref, tol, "float64").passed


def test_rtol_scales_with_reference():
    tol = Tolerance(max_atol=0.0, max_rtol=0.25, required_matched_ratio=1.0)
    ref = torch.full((4,), 8.0, dtype=torch.float64)
    assert compare(ref + 2.0, ref, tol, "float64").passed
    assert not compare(ref + 2.001, ref, tol, "float64").passed
    assert not compare(ref * 0 + 0.001, ref * 0, tol, "float64").passed  # rtol alone cannot excuse |ref| = 0


def test_matched_ratio_threshold():
    tol = Tolerance(max_atol=1e-3, max_rtol=0.0, required_matched_ratio=0.99)
    ref, out = ref_and_out(100)
    out[0] += 1.0
    r = compare(out, ref, tol, "float64")
    assert r.passed and r.matched_ratio == pytest.approx(0.99)
    out[1] += 1.0
    r = compare(out, ref, tol, "float64")
    assert not r.passed and r.matched_ratio == pytest.approx(0.98) and "2 of 100" in r.message


def test_max_error_cap_is_strict():
    tol = Tolerance(max_atol=1e-3, max_rtol=0.0, required_matched_ratio=0.9, max_error_cap=0.5)
    ref, out = ref_and_out(100)
    out[7] += 0.5
    assert compare(out, ref, tol, "float64").passed  # equal to the cap passes
    out[7] += 0.01
    r = compare(out, ref, tol, "float64")
    assert not r.passed and "max_error_cap" in r.message and "index 7" in r.message


def test_float64_compared_in_float64():
    tol = Tolerance(max_atol=1e-12, max_rtol=0.0, required_matched_ratio=1.0)
    ref = torch.ones(4, dtype=torch.float64)
    out = ref + 1e-10  # float32 would round both to 1.0
    assert not compare(out, ref, tol, "float64").passed


def test_bfloat16_outputs():
    ref = torch.randn(1000, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    assert compare(ref.clone(), ref, TOL, "bfloat16").passed
    assert not compare(-ref, ref, Tolerance(), "bfloat16").passed


# -- NaN / Inf --------------------------------------------------------------------------------------

def test_any_nan_fails_whatever_the_ratio():
    tol = Tolerance(required_matched_ratio=0.0)
    ref, out = ref_and_out(1000)
    out[3] = math.nan
    r = compare(out, ref, tol, "float64")
    assert not r.passed and r.has_nan and "NaN" in r.message
    assert math.isfinite(r.max_absolute_error) and math.isfinite(r.max_relative_error)


def test_positive_inf_in_output_fails():
    ref, out = ref_and_out()
    out[0] = math.inf
    r = compare(out, ref, Tolerance(required_matched_ratio=0.0), "float64")
    assert not r.passed and r.has_inf and not r.has_nan


def test_reference_nan_or_pos_inf_is_invalid_reference():
    ref, out = ref_and_out()
    ref[5] = math.nan
    r = compare(out, ref, TOL, "float64")
    assert r.status == Status.INVALID_REFERENCE and "NaN" in r.message
    ref, out = ref_and_out()
    ref[5], out[5] = math.inf, math.inf  # even a matching +inf: the published rule fails it
    assert compare(out, ref, TOL, "float64").status == Status.INVALID_REFERENCE


def test_negative_inf_needs_the_flag():
    ref, out = ref_and_out()
    ref[2] = out[2] = -math.inf
    r = compare(out, ref, TOL, "float64")
    assert r.status == Status.INVALID_REFERENCE and "allow_negative_inf" in r.message
    flagged = Tolerance(max_atol=1e-2, max_rtol=1e-2, required_matched_ratio=1.0, allow_negative_inf=True)
    r = compare(out, ref, flagged, "float64")
    assert r.passed and not r.has_inf


def test_negative_inf_must_match_in_position():
    flagged = Tolerance(required_matched_ratio=0.0, allow_negative_inf=True)
    ref, out = ref_and_out()
    ref[2] = -math.inf
    assert not compare(out, ref, flagged, "float64").passed  # finite where the reference is -inf
    ref, out = ref_and_out()
    out[2] = -math.inf
    r = compare(out, ref, flagged, "float64")
    assert not r.passed and r.has_inf  # -inf where the reference is finite


def test_unwritten_nan_prefilled_outputs_fail():
    d = build_definition({"y": {"shape": ["n"], "dtype": "bfloat16"}})
    (buffer,) = allocate_outputs(d, {"n": 1000}, "cpu")
    ref = torch.randn(1000, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    buffer[:995] = ref[:995]  # a kernel that skips the tail
    status, c = check_outputs([buffer], [ref], d, Tolerance(required_matched_ratio=0.99))
    assert status == Status.INCORRECT_NUMERICAL and c.has_nan and c.output == "y"


# -- all-zero rule ----------------------------------------------------------------------------------

def test_all_zero_output_fails_even_within_matched_ratio():
    tol = Tolerance(max_atol=1e-2, max_rtol=1e-2, required_matched_ratio=0.9)
    ref = torch.full((100,), 1e-4, dtype=torch.float64)
    ref[0] = 5.0  # one element (1 %) the zeros get wrong
    r = compare(torch.zeros(100, dtype=torch.float64), ref, tol, "float64")
    assert not r.passed and "all zeros" in r.message
    nonzero = torch.full((100,), 1e-4, dtype=torch.float64)  # same single miss, but not all zeros
    assert compare(nonzero, ref, tol, "float64").passed


def test_tiny_reference_accepts_zero_output_with_a_warning():
    ref = torch.full((100,), 1e-6, dtype=torch.float64)
    r = compare(torch.zeros(100, dtype=torch.float64), ref, TOL, "float64")
    assert r.passed and r.warnings and "within atol" in r.warnings[0]
    assert r.max_absolute_error == pytest.approx(1e-6)  # the real error, not an L2 norm


def test_all_zero_reference_and_output_pass():
    z = torch.zeros(10)
    assert compare(z, z.clone(), TOL, "float32").passed


# -- relative error -------------------------------------------------------------------------------

def test_relative_error_denominator_floors_at_atol():
    tol = Tolerance(max_atol=1e-2, max_rtol=0.0, required_matched_ratio=0.0)
    ref = torch.zeros(4, dtype=torch.float64)
    ref[1] = 1.0
    out = ref.clone()
    out[0] = 1e-3
    r = compare(out, ref, tol, "float64")
    assert r.max_relative_error == pytest.approx(0.1)


def test_relative_error_finite_with_zero_atol():
    tol = Tolerance(max_atol=0.0, max_rtol=0.0, required_matched_ratio=0.0)
    ref = torch.zeros(4, dtype=torch.float64)
    ref[1] = 1.0
    r = compare(ref + 1e-3, ref, tol, "float64")
    assert math.isfinite(r.max_relative_error) and r.max_relative_error == pytest.approx(1e-3 / 1e-12)


# -- integers and bools ---------------------------------------------------------------------------

def test_integer_off_by_one_fails_whatever_the_tolerance():
    loose = Tolerance(max_atol=10.0, max_rtol=1.0, required_matched_ratio=0.0)
    ref = torch.arange(1000, dtype=torch.int64)
    out = ref.clone()
    out[500] += 1
    r = compare(out, ref, loose, "int64")
    assert not r.passed and r.matched_ratio == pytest.approx(0.999)
    assert "index 500" in r.message and "501" in r.message and r.max_absolute_error == 1
    assert compare(ref.clone(), ref, loose, "int64").passed


def test_int64_compared_exactly_beyond_float_precision():
    ref = torch.tensor([2**53, 2**62], dtype=torch.int64)
    out = ref + 1  # identical after a cast to float32 or float64
    assert not compare(out, ref, Tolerance(required_matched_ratio=0.0), "int64").passed


def test_bool_outputs_exact():
    ref = torch.tensor([True, False, True])
    assert compare(ref.clone(), ref, TOL, "bool").passed
    r = compare(~ref, ref, Tolerance(required_matched_ratio=0.0), "bool")
    assert not r.passed and r.matched_ratio == 0.0


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8])
def test_small_integers_exact(dtype):
    ref = torch.arange(0, 100, dtype=dtype)
    out = ref.clone()
    out[-1] -= 1
    assert not compare(out, ref, TOL, str(dtype).removeprefix("torch.")).passed


# -- low-precision floats ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_compared_through_float32(name):
    dtype = getattr(torch, name)
    ref = torch.linspace(-4, 4, 64).to(dtype)
    assert compare(ref.clone(), ref, TOL, name).passed
    out = ref.float()
    out[10] += 1.0
    assert not compare(out.to(dtype), ref, TOL, name).passed


def test_fp8_nan_fails():
    ref = torch.ones(8).to(torch.float8_e4m3fn)
    out = torch.full((8,), math.nan).to(torch.float8_e4m3fn)
    r = compare(out, ref, Tolerance(required_matched_ratio=0.0), "float8_e4m3fn")
    assert not r.passed and r.has_nan


def test_fp4_compared_per_unpacked_value():
    codes = torch.tensor([[2, 4, 6, 7, 10, 12, 1, 3]], dtype=torch.uint8)  # 8 values, 4 bytes
    ref = pack_codes(codes)
    assert compare(pack_codes(codes.clone()), ref, TOL, "float4_e2m1fn_x2").passed
    changed = codes.clone()
    changed[0, 1] = 5  # high nibble of byte 0: 2.0 -> 3.0
    r = compare(pack_codes(changed), ref, Tolerance(max_atol=0.1, max_rtol=0.0, required_matched_ratio=0.0),
                "float4_e2m1fn_x2")
    assert r.matched_ratio == pytest.approx(7 / 8) and r.max_absolute_error == pytest.approx(1.0)
    r = compare(pack_codes(changed), ref, TOL, "float4_e2m1fn_x2")
    assert not r.passed and "index 1" in r.message


# -- shapes of data -----------------------------------------------------------------------------------

def test_empty_tensors_pass():
    assert compare(torch.zeros(0, 3), torch.zeros(0, 3), TOL, "float32").passed


def test_python_scalars():
    assert compare(1.0, 1.005, TOL, "float32").passed
    assert not compare(1.0, 2.0, TOL, "float32").passed
    assert not compare(3, 4, TOL, "int32").passed


def test_chunked_equals_unchunked(monkeypatch):
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(10_000, generator=g, dtype=torch.float64) + 3
    out = ref + torch.randn(10_000, generator=g, dtype=torch.float64) * 0.01
    out[7777] += 5.0
    tol = Tolerance(max_atol=0.01, max_rtol=0.01, required_matched_ratio=0.5)
    whole = compare(out, ref, tol, "float64")
    monkeypatch.setattr(elementwise, "CHUNK_ELEMENTS", 1000)
    chunked = compare(out, ref, tol, "float64")
    assert chunked.matched_ratio == whole.matched_ratio
    assert chunked.max_absolute_error == whole.max_absolute_error
    assert chunked.max_relative_error == pytest.approx(whole.max_relative_error)
    tol_strict = Tolerance(max_atol=0.01, max_rtol=0.01, required_matched_ratio=0.5, max_error_cap=1.0)
    assert "index 7777" in compare(out, ref, tol_strict, "float64").message


def test_non_contiguous_outputs():
    ref = torch.randn(8, 8, generator=torch.Generator().manual_seed(4))
    assert compare(ref.t().contiguous().t(), ref, TOL, "float32").passed


# -- check_outputs and merge_trials ------------------------------------------------------------------

TWO = build_definition({"a": {"shape": ["n"], "dtype": "float32"}, "b": {"shape": ["n"], "dtype": "int64"}})


def test_check_outputs_names_the_first_failing_output():
    a, b = torch.ones(4), torch.arange(4)
    status, c = check_outputs([a, b + 1], [a, b], TWO, TOL)
    assert status == Status.INCORRECT_NUMERICAL and c.output == "b" and "differ" in c.message
    status, c = check_outputs([a * 2, b + 1], [a, b], TWO, TOL)
    assert c.output == "a"


def test_check_outputs_pass_reports_worst_stats():
    a, b = torch.ones(4), torch.arange(4)
    status, c = check_outputs([a + 0.001, b], [a, b], TWO, TOL)
    assert status == Status.PASSED and c.output is None and c.trials == 1
    assert c.max_absolute_error == pytest.approx(0.001, rel=1e-3)


def test_check_outputs_validates_reference_against_declaration():
    a, b = torch.ones(4), torch.arange(4)
    status, c = check_outputs([a, b], [a, b.int()], TWO, TOL)
    assert status == Status.INVALID_REFERENCE and "int32" in c.message
    status, c = check_outputs([a, b], [a, b], TWO, TOL, axis_values={"n": 5})
    assert status == Status.INVALID_REFERENCE and "(5,)" in c.message


def test_check_outputs_scalar_outputs():
    d = build_definition({"loss": {"shape": None, "dtype": "float32"}})
    assert check_outputs([1.0], [1.001], d, TOL)[0] == Status.PASSED
    assert check_outputs([1.0], [1.001], d, TOL, axis_values={"n": 3})[0] == Status.PASSED
    assert check_outputs([1.0], [2.0], d, TOL)[0] == Status.INCORRECT_NUMERICAL
    assert check_outputs([1.0], [torch.ones(3)], d, TOL)[0] == Status.INVALID_REFERENCE


def test_check_outputs_count_mismatch():
    a = torch.ones(4)
    assert check_outputs([a], [a, a], TWO, TOL)[0] == Status.INCORRECT_SHAPE
    assert check_outputs([a, a], [a], TWO, TOL)[0] == Status.INVALID_REFERENCE


def test_correctness_is_json_safe_after_nan_and_inf():
    d = build_definition({"a": {"shape": ["n"], "dtype": "float32"}})
    out = torch.tensor([math.nan, math.inf, 1.0, -math.inf])
    status, c = check_outputs([out], [torch.ones(4)], d, TOL)
    assert status == Status.INCORRECT_NUMERICAL and c.has_nan
    json.dumps(c.to_dict(), allow_nan=False)


def test_merge_trials_is_the_worst_case():
    good = Correctness(max_absolute_error=0.001, max_relative_error=0.01, matched_ratio=1.0, trials=1)
    bad = Correctness(max_absolute_error=0.5, max_relative_error=0.2, matched_ratio=0.9, has_nan=True, trials=1,
                      output="y", message="y: NaN")
    merged = merge_trials([good, bad, good])
    assert merged.trials == 3 and merged.max_absolute_error == 0.5 and merged.max_relative_error == 0.2
    assert merged.matched_ratio == 0.9 and merged.has_nan and merged.output == "y" and merged.message == "y: NaN"
    assert merge_trials([]).trials == 0
    assert merge_trials([good, good]).output is None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64", "float8_e4m3fn"])
@pytest.mark.parametrize("case", ["close", "far", "zeros", "nan_chunk", "inf_chunk", "neg_inf", "huge"])
def test_finite_short_path_matches_the_general_path(monkeypatch, dtype, case):
    """Chunks where everything is finite take a short path; its results equal the general path's."""
    g = torch.Generator().manual_seed(11)
    ref = torch.randn(5000, generator=g, dtype=torch.float64) * 3
    out = ref + torch.randn(5000, generator=g, dtype=torch.float64) * 0.02
    if case == "far":
        out[1234] += 50.0
    elif case == "zeros":
        out = torch.zeros_like(out)
    elif case == "nan_chunk":
        out[2500] = float("nan")
    elif case == "inf_chunk":
        out[4321] = float("inf")
    elif case == "neg_inf":
        ref[10], out[10] = -math.inf, -math.inf
    elif case == "huge":
        ref[:900] = 1.5e308 if dtype == "float64" else ref[:900]
    torch_dtype = dtypes.torch_dtype(dtype)
    out, ref = out.to(torch_dtype), ref.to(torch_dtype)
    monkeypatch.setattr(elementwise, "CHUNK_ELEMENTS", 1000)
    for allow in (False, True):
        tol = Tolerance(max_atol=0.05, max_rtol=0.01, required_matched_ratio=0.9, allow_negative_inf=allow)
        short = compare(out, ref, tol, dtype)
        with monkeypatch.context() as m:
            m.setattr(elementwise, "accumulate_finite", lambda *a: False)
            general = compare(out, ref, tol, dtype)
        assert short == general


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("case", ["random", "rows", "tiny", "zeros", "neg_zero", "nan_ref", "inf_ref", "huge"])
def test_identical_bytes_path_matches_the_full_comparison(monkeypatch, dtype, case):
    """An output equal byte for byte to a finite reference is decided from one pass; its result (errors,
    ratio, warnings, numerics findings) equals the full comparison's, and anything else takes the full path."""
    g = torch.Generator().manual_seed(5)
    ref = (torch.randn(64, 48, generator=g, dtype=torch.float64) * 3).to(dtypes.torch_dtype(dtype))
    if case == "rows":
        ref = ref * torch.logspace(-3, 3, 64, dtype=torch.float64).to(ref.dtype)[:, None]
    elif case == "tiny":
        ref = ref * 1e-6
    elif case == "zeros":
        ref = torch.zeros_like(ref)
    elif case == "nan_ref":
        ref[3, 4] = float("nan")
    elif case == "inf_ref":
        ref[7, 1] = -math.inf
    elif case == "huge":
        ref[:2] = torch.finfo(ref.dtype).max
    out = ref.clone()
    if case == "neg_zero":
        ref[0, 0], out[0, 0] = 0.0, -0.0  # equal values, different bytes: the full path decides
    calls = []
    monkeypatch.setattr(elementwise, "CHUNK_ELEMENTS", 1000)
    for tol in (Tolerance(max_atol=1e-5, max_rtol=0.05), Tolerance(max_atol=1e-2, max_rtol=0.0, max_error_cap=0.0),
                Tolerance(max_atol=1e-2, max_rtol=1e-2, allow_negative_inf=True)):
        fast = compare(out, ref, tol, dtype, name="y")
        with monkeypatch.context() as m:
            m.setattr(correctness, "_identical", lambda *a: calls.append(1))
            full = compare(out, ref, tol, dtype, name="y")
        assert fast == full
    assert calls and all(c == 1 for c in calls)


def test_identical_bytes_path_is_taken_only_for_equal_bytes(monkeypatch):
    ref = torch.randn(1000, dtype=torch.bfloat16) + 2
    out = ref.clone()
    taken = []
    original = correctness._identical
    monkeypatch.setattr(correctness, "_identical", lambda *a: taken.append(original(*a)) or taken[-1])
    assert compare(out, ref, TOL, "bfloat16").passed and taken[-1] is not None
    out[-1] = out[-1] * 2  # the last element differs: the full comparison fails it
    result = compare(out, ref, TOL, "bfloat16")
    assert taken[-1] is None and not result.passed and result.matched_ratio < 1.0


def test_broadcast_views_are_compared_without_the_identical_bytes_path(monkeypatch):
    # a reference may return a broadcast view of gigabytes (Quant/023: two 16 GiB views of a 1 MB tensor); the
    # bytes path would copy it whole twice, so views go straight to the chunked comparison, with the same verdict
    small = torch.randn(8, 1, 16) + 2
    ref = small.expand(8, 64, 16)
    taken = []
    original = correctness._identical
    monkeypatch.setattr(correctness, "_identical", lambda *a: taken.append(original(*a)) or taken[-1])
    result = compare(ref.clone(), ref, TOL, "float32")
    assert result.passed and result.matched_ratio == 1.0 and taken == [None]
    wrong = ref.clone()
    wrong[3, 5, 7] += 1.0
    assert not compare(wrong, ref, TOL, "float32").passed
    assert compare(ref.contiguous(), ref.contiguous(), TOL, "float32").passed and taken[-1] is not None
