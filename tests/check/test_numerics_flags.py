"""Numerics flags (solbench/check/numerics_flags.py): honest low-precision variants raise none, the
patterns the official tolerance lets through raise theirs, and strict mode turns a flag into a failure."""

from __future__ import annotations

import pytest
import torch

from solbench.check import elementwise, numerics_flags
from solbench.check.correctness import check_outputs, compare, merge_trials
from solbench.check.numerics_flags import chunk_ranges
from solbench.spec.trace import Correctness, Status
from solbench.spec.workload import Tolerance
from tests.check.check_builders import build_definition

RMS_TOL = Tolerance(max_atol=1e-5, max_rtol=0.05)  # L1/069_rms_norm's tolerance
DEFAULT_TOL = Tolerance()  # atol 0.01, rtol 0.01, 99% matched


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rms_inputs(rows=512, hidden=1024, seed=0, structured=False):
    g = gen(seed)
    h, r = torch.randn(rows, hidden, generator=g), torch.randn(rows, hidden, generator=g)
    if structured:  # rows of different scales, as the structured trials give
        scale = torch.exp2(torch.rand(rows, 1, generator=g) * 3.5 - 3)
        h, r = h * scale, r * scale
    w = 1 + 0.2 * torch.randn(hidden, generator=g)
    return h.to(torch.bfloat16), r.to(torch.bfloat16), w.to(torch.bfloat16)


def rms_reference(h, r, w, eps=1e-5):
    x = (r + h).float()
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16)


def rms_fp32_once(h, r, w, eps=1e-5):
    """Honest: fp32 all the way, a sum instead of a mean, one rounding at the end."""
    x = (r + h).float()
    var = (x * x).sum(-1, keepdim=True) / x.shape[-1]
    return (x / torch.sqrt(var + eps) * w.float()).to(torch.bfloat16)


def rms_exact(h, r, w, eps=1e-5):
    """Honest: the exact answer (float64), rounded once."""
    x = (r + h).double()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()).to(torch.bfloat16)


def rms_truncating(h, r, w, eps=1e-5):
    """Honest but one-sided: rounds toward zero instead of to nearest (at most half an ulp)."""
    x = (r + h).double()
    v = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()).float()
    return (v.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)


def rms_per_row_scale_rounded(h, r, w, eps=1e-5):
    """Honest: the per-row statistic rounded to bf16 before use (a bf16 kernel's row state)."""
    x = (r + h).float()
    inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps).to(torch.bfloat16).float()
    return (x * inv * w.float()).to(torch.bfloat16)


HONEST_RMS = [rms_fp32_once, rms_exact, rms_truncating, rms_per_row_scale_rounded]


@pytest.mark.parametrize("variant", HONEST_RMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("structured", [False, True])
def test_honest_rmsnorm_variants_raise_no_flag(variant, structured):
    h, r, w = rms_inputs(structured=structured)
    result = compare(variant(h, r, w), rms_reference(h, r, w), RMS_TOL, "bfloat16")
    assert result.passed and result.numerics.flags == [], result.numerics
    assert abs(result.numerics.bias) < numerics_flags.BIAS_LIMIT / 2


def test_honest_matmul_accumulation_orders_raise_no_flag():
    g = gen(1)
    a, b = torch.randn(256, 4096, generator=g).half(), (torch.randn(4096, 512, generator=g) / 64).half()
    reference = (a.float() @ b.float()).half()
    exact = (a.double() @ b.double()).half()
    split_k = sum((a[:, k:k + 512].float() @ b[k:k + 512].float()) for k in range(0, 4096, 512)).half()
    for out in (exact, split_k):
        result = compare(out, reference, DEFAULT_TOL, "float16")
        assert result.passed and result.numerics.flags == [], result.numerics


def truncated(x: torch.Tensor, bits: int) -> torch.Tensor:
    """float32 with its lowest `bits` mantissa bits cleared (round toward zero)."""
    return (x.view(torch.int32) & ~((1 << bits) - 1)).view(torch.float32)


@pytest.mark.parametrize("tolerance", [Tolerance(0.002, 1e-5), DEFAULT_TOL, Tolerance(0.005, 0.02)],
                         ids=["atol-calibrated", "default", "loose"])
def test_honest_tf32_products_that_truncate_their_operands_raise_no_flag(tolerance):
    """TF32 tensor cores read ten mantissa bits of each float32 operand: every product is biased
    toward zero by about 1.4 unit roundoffs of TF32, a fixed share of each output (a scale bias)."""
    g = gen(12)
    a, b = torch.randn(256, 1024, generator=g), torch.randn(1024, 256, generator=g) / 32
    reference = a @ b
    tf32 = (truncated(a, 13).double() @ truncated(b, 13).double()).float()
    result = compare(tf32, reference, tolerance, "float32")
    assert result.passed and result.numerics.flags == [], result.numerics
    assert result.numerics.bias_kind == "scale" and -2 < result.numerics.bias_units < -1


def test_honest_output_truncated_to_bf16_raises_no_flag():
    g = gen(13)
    values = torch.randn(512, 512, generator=g) * 4
    result = compare(truncated(values, 16).to(torch.bfloat16), values.to(torch.bfloat16), DEFAULT_TOL, "bfloat16")
    assert result.passed and result.numerics.flags == [] and -1 < result.numerics.bias_units < -0.5


def test_honest_softmax_and_layernorm_variants_raise_no_flag():
    g = gen(2)
    logits = torch.randn(384, 1000, generator=g) * 3
    reference = torch.softmax(logits, -1).to(torch.bfloat16)
    manual = torch.exp(logits.double() - logits.double().amax(-1, keepdim=True))
    manual = (manual / manual.sum(-1, keepdim=True)).to(torch.bfloat16)
    assert compare(manual, reference, DEFAULT_TOL, "bfloat16").numerics.flags == []
    x = torch.randn(384, 768, generator=g) * 2 + 1
    reference = torch.nn.functional.layer_norm(x, (768,)).to(torch.bfloat16)
    var, mean = torch.var_mean(x.double(), -1, unbiased=False, keepdim=True)
    welford = ((x.double() - mean) / torch.sqrt(var + 1e-5)).to(torch.bfloat16)
    result = compare(welford, reference, DEFAULT_TOL, "bfloat16")
    assert result.passed and result.numerics.flags == [], result.numerics


def test_honest_fp8_quantisation_with_a_slightly_different_scale_raises_no_flag():
    """Rounding-boundary flips of one fp8 step, all in one direction, in a few elements per row."""
    g = gen(3)
    x = torch.randn(256, 2048, generator=g)
    amax = x.abs().amax(-1, keepdim=True)
    reference = (x / (amax / 448)).to(torch.float8_e4m3fn)
    other = (x * (448 / amax) * (1 + 2 ** -22)).to(torch.float8_e4m3fn)  # the scale one ulp off, always upward
    result = compare(other, reference, Tolerance(max_atol=0.1, max_rtol=0.13), "float8_e4m3fn")
    assert result.passed and result.numerics.flags == [], result.numerics


def test_scattered_whole_rows_from_near_ties_raise_no_flag():
    """A routing near-tie taken the other way gives a row of plausible values, alone, somewhere: the
    matched ratio's business, not a pattern."""
    g = gen(4)
    reference = torch.randn(2048, 256, generator=g)
    out = reference.clone()
    flipped = torch.randperm(2048, generator=g)[:12]  # 0.6% of the rows, scattered
    out[flipped] = torch.randn(12, 256, generator=g)
    result = compare(out, reference, DEFAULT_TOL, "float32")
    assert result.passed and result.numerics.flags == [], result.numerics
    assert result.numerics.mismatched_rows == 12 and result.numerics.outliers == 0


# -- what is flagged ------------------------------------------------------------------------------

def test_small_systematic_error_on_every_element_is_flagged_as_bias():
    h, r, w = rms_inputs()
    reference = rms_reference(h, r, w)
    for factor in (1.034, 0.97, 1.015):
        result = compare((reference.float() * factor).to(torch.bfloat16), reference, RMS_TOL, "bfloat16")
        assert result.passed, "inside the official tolerance"
        assert result.numerics.flags == ["systematic_bias"] and result.numerics.bias_kind == "scale"
        assert (result.numerics.bias > 0) == (factor > 1) and abs(result.numerics.bias) > 0.25
        assert abs(result.numerics.bias_units) > numerics_flags.BIAS_UNITS


def test_offset_bias_and_per_row_bias_of_alternating_sign_are_flagged():
    g = gen(5)
    reference = torch.randn(512, 512, generator=g)
    shifted = reference + 0.006  # atol 0.01: 60% of the allowed error near zero, every element
    result = compare(shifted, reference, DEFAULT_TOL, "float32")
    assert result.passed and result.numerics.flags == ["systematic_bias"] and result.numerics.bias_kind == "offset"
    sign = torch.ones(512, 1)
    sign[1::2] = -1
    reference = reference * 10  # well above atol, where rtol decides
    alternating = reference * (1 + 0.008 * sign)  # each row 0.8% off, rows alternating: global mean ~ 0
    result = compare(alternating, reference, DEFAULT_TOL, "float32")
    assert result.passed and abs(result.numerics.bias) < 0.05
    assert result.numerics.flags == ["systematic_bias"] and result.numerics.biased_row_share == 1.0


def test_garbage_in_the_last_rows_is_flagged_as_outliers_and_concentrated():
    h, r, w = rms_inputs(rows=2048)
    reference = rms_reference(h, r, w)
    out = reference.clone()
    out[-10:] = 1000.0  # the last 0.5% of the rows
    result = compare(out, reference, RMS_TOL, "bfloat16")
    assert result.passed, "1% of elements may miss by any amount under the official rule"
    found = result.numerics
    assert found.flags == ["outliers", "concentrated_mismatches"]
    assert found.outliers == 10 * 1024 and found.longest_mismatched_run == 10 and found.worst_error_to_magnitude > 100


def test_plausible_garbage_in_contiguous_rows_or_columns_is_concentrated():
    g = gen(6)
    reference = torch.randn(1024, 1024, generator=g)
    rows = reference.clone()
    rows[-8:] = torch.randn(8, 1024, generator=g)  # right magnitude, wrong values: no outlier
    result = compare(rows, reference, DEFAULT_TOL, "float32")
    assert result.passed and result.numerics.flags == ["concentrated_mismatches"]
    assert result.numerics.outliers == 0 and result.numerics.longest_mismatched_run == 8
    columns = reference.clone()
    columns[:, -8:] = torch.randn(1024, 8, generator=g)  # the last tile of columns never computed
    result = compare(columns, reference, DEFAULT_TOL, "float32")
    assert result.passed and result.numerics.flags == ["concentrated_mismatches"]
    assert result.numerics.mismatched_columns == 8 and result.numerics.mismatched_rows == 0


def test_a_single_unwritten_row_of_zeros_is_concentrated():
    g = gen(7)
    reference = torch.randn(300, 512, generator=g)
    out = reference.clone()
    out[-1] = 0.0
    result = compare(out, reference, DEFAULT_TOL, "float32")
    assert result.passed and result.numerics.flags == ["concentrated_mismatches"] and result.numerics.zero_rows == 1


def test_flags_do_not_depend_on_chunking(monkeypatch):
    """Rows cut by chunk boundaries (runs continue across them; rows longer than a chunk go in pieces)."""
    g = gen(8)
    reference = torch.randn(640, 96, generator=g)
    out = reference * 1.006
    out[300:310] = 100.0  # a run that crosses chunk boundaries below
    out[:, 5] += 1.0
    whole = compare(out, reference, DEFAULT_TOL, "float32").numerics
    monkeypatch.setattr(elementwise, "CHUNK_ELEMENTS", 96 * 7)
    chunked = compare(out, reference, DEFAULT_TOL, "float32").numerics
    assert chunked.flags == whole.flags == ["outliers", "concentrated_mismatches", "systematic_bias"]
    for key in ("outliers", "mismatched_rows", "longest_mismatched_run", "mismatched_columns", "biased_row_share"):
        assert getattr(chunked, key) == getattr(whole, key), key
    assert chunked.bias == pytest.approx(whole.bias, rel=1e-9)
    monkeypatch.setattr(elementwise, "CHUNK_ELEMENTS", 40)  # rows of 96 in pieces of at most 40
    pieces = compare(out, reference, DEFAULT_TOL, "float32").numerics
    assert pieces.outliers == whole.outliers and pieces.mismatched_columns == 0
    assert pieces.bias == pytest.approx(whole.bias, rel=1e-9)


@pytest.mark.parametrize("n,step,line", [(100, 30, 10), (100, 30, 40), (96, 96, 96), (7, 100, 1), (0, 8, 4),
                                         (120, 25, 120), (10, 3, 1000)])
def test_chunk_ranges_cover_everything_once_and_never_cut_a_row(n, step, line):
    ranges = list(chunk_ranges(n, step, line))
    covered = [i for start, end in ranges for i in range(start, end)]
    assert covered == list(range(n))
    assert all(0 < end - start <= step for start, end in ranges)
    effective = max(1, min(line, n)) if n else 1
    for start, end in ranges:
        assert start // effective == (end - 1) // effective or (start % effective == 0 and end % effective == 0)


def test_non_finite_positions_count_nowhere():
    g = gen(9)
    reference = torch.randn(64, 64, generator=g, dtype=torch.float64)
    reference[:, 0] = -torch.inf
    out = reference * 1.008
    tol = Tolerance(allow_negative_inf=True)
    result = compare(out, reference, tol, "float64")
    assert result.passed and result.numerics.flags == ["systematic_bias"] and result.numerics.mismatched_columns == 0


def test_packed_fp4_outputs_get_flags_on_their_values():
    from solbench.inputs.fp4 import pack_codes

    g = gen(10)
    codes = torch.randint(0, 16, (256, 64), generator=g, dtype=torch.uint8)
    reference = pack_codes(codes)
    garbage = codes.clone()
    garbage[-8:] = (garbage[-8:] + 3) % 16  # the last rows wrong
    result = compare(pack_codes(garbage), reference, Tolerance(max_atol=0.0, max_rtol=0.0,
                                                                required_matched_ratio=0.9), "float4_e2m1fn_x2")
    assert result.numerics is not None and "concentrated_mismatches" in result.numerics.flags
    assert result.numerics.longest_mismatched_run == 8  # rows of 64 values (32 bytes)


# -- check_outputs: default and strict modes; trials; traces --------------------------------------

DEFINITION = build_definition({"y": {"shape": ["n", "h"], "dtype": "bfloat16"},
                               "z": {"shape": ["n"], "dtype": "float32"}},
                              axes={"n": {"type": "var"}, "h": {"type": "const", "value": 1024}})


def flagged_outputs():
    h, r, w = rms_inputs()
    reference = rms_reference(h, r, w)
    z = torch.randn(512, generator=gen(11))
    return [reference, z], [(reference.float() * 1.034).to(torch.bfloat16), z.clone()]


def test_default_mode_passes_and_reports_the_flags():
    references, outputs = flagged_outputs()
    status, c = check_outputs(outputs, references, DEFINITION, RMS_TOL, {"n": 512, "h": 1024})
    assert status == Status.PASSED and c.flags == ["systematic_bias"]
    assert set(c.numerics) == {"y", "z"} and c.numerics["y"]["flags"] == ["systematic_bias"]
    assert c.numerics["z"]["flags"] == [] and c.numerics["y"]["bias"] > 0.5
    assert "numerics flagged" in c.message and "fails in strict mode" in c.message


def test_strict_mode_fails_flagged_outputs():
    references, outputs = flagged_outputs()
    status, c = check_outputs(outputs, references, DEFINITION, RMS_TOL, {"n": 512, "h": 1024}, strict=True)
    assert status == Status.INCORRECT_NUMERICAL and c.output == "y"
    assert "strict mode" in c.message and "lean one way" in c.message and c.flags == ["systematic_bias"]
    status, c = check_outputs(references, references, DEFINITION, RMS_TOL, {"n": 512, "h": 1024}, strict=True)
    assert status == Status.PASSED and c.flags == []


def test_merge_trials_unites_flags_and_keeps_the_worst_numbers():
    a = Correctness(trials=1, flags=["systematic_bias"],
                    numerics={"y": {"flags": ["systematic_bias"], "bias": -0.6, "outliers": 0}})
    b = Correctness(trials=1, flags=["outliers"], numerics={"y": {"flags": ["outliers"], "bias": 0.1, "outliers": 3},
                                                            "z": {"flags": [], "bias": 0.0}})
    a.message, b.message = "numerics flagged: y: bias", "numerics flagged: y: outliers"
    merged = merge_trials([a, b, Correctness(trials=1)])
    assert merged.flags == ["outliers", "systematic_bias"] and merged.trials == 3
    assert merged.message == "numerics flagged: y: bias; numerics flagged: y: outliers"
    assert merged.numerics["y"]["flags"] == ["outliers", "systematic_bias"]
    assert merged.numerics["y"]["bias"] == -0.6 and merged.numerics["y"]["outliers"] == 3
    assert merged.numerics["z"]["flags"] == []


def test_flags_survive_the_trace_round_trip_and_old_traces_load():
    references, outputs = flagged_outputs()
    _, c = check_outputs(outputs, references, DEFINITION, RMS_TOL, {"n": 512, "h": 1024})
    back = Correctness.from_dict(c.to_dict())
    assert back == c
    old = {"max_absolute_error": 0.1, "max_relative_error": 0.2, "matched_ratio": 1.0, "has_nan": False,
           "has_inf": False, "trials": 3}
    loaded = Correctness.from_dict(old)
    assert loaded.flags == [] and loaded.numerics is None


@pytest.mark.gpu
def test_flags_on_the_gpu_match_the_cpu():
    """The judge compares large outputs on the reference worker's GPU: same flags, same numbers."""
    h, r, w = rms_inputs(rows=2048)
    reference = rms_reference(h, r, w)
    garbage = reference.clone()
    garbage[-10:] = 1000.0
    for out in (rms_fp32_once(h, r, w), (reference.float() * 1.034).to(torch.bfloat16), garbage):
        on_cpu = compare(out, reference, RMS_TOL, "bfloat16")
        on_gpu = compare(out.cuda(), reference.cuda(), RMS_TOL, "bfloat16")
        assert on_gpu.passed == on_cpu.passed and on_gpu.numerics.flags == on_cpu.numerics.flags
        for key in ("outliers", "mismatched_rows", "longest_mismatched_run", "mismatched_columns", "biased_row_share"):
            assert getattr(on_gpu.numerics, key) == getattr(on_cpu.numerics, key), key
        assert on_gpu.numerics.bias == pytest.approx(on_cpu.numerics.bias, abs=1e-9)
