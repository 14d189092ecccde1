"""The `solar` rules issue 36 fixed against the published B200 bounds, each against a count derived
by hand from the axes (never a copied value). Hand-made definitions always run; the shared problems
are skipped cleanly without the shared data."""

from __future__ import annotations

import pytest

from solbench.sol.analyser import SOLAR_OVERHEAD_MS, analyse, analyse_workload, sol_time_ms
from solbench.sol.hardware import load_spec
from tests.sol.conftest import fp8_scaled_mm_definition, shared_problem

B200 = load_spec("B200")
BW = B200.hbm_bytes_per_s


_problem = shared_problem


def test_fp8_made_inside_the_reference_sets_the_solar_width(definition_of):
    """A bf16-in, bf16-out reference that quantises to fp8 inside is an fp8 problem: 1 B a value."""
    n = 4096
    ref = ("import torch\n"
           "def run(x):\n"
           "    return x.to(torch.float8_e4m3fn).to(torch.bfloat16) * 2\n")
    d = definition_of({"x": (["N"], "bfloat16")}, {"y": (["N"], "bfloat16")}, ref, {"N": n})
    solar = analyse(d, {}, convention="solar")
    assert solar.byte_width == 1.0 and solar.bytes_min == 2 * n
    strict = analyse(d, {}, convention="strict")
    assert strict.bytes_min == 2 * n * 2  # strict: each tensor its own width, unchanged


def test_no_constant_offset_on_fp8_and_nvfp4_bounds(definition_of):
    """The 0.4 us offset is on bf16 problems only; an fp8 bound is the bare roofline."""
    m, n, k = 128, 256, 512
    d = fp8_scaled_mm_definition(m, n, k)
    bytes_ = m * k + n * k + 1 + 1 + m * n  # one byte a value
    bound = sol_time_ms(analyse(d, {}, convention="solar"), B200)
    roofline = max(2 * m * n * k / (B200.matmul_tflops("float8_e4m3fn") * 1e12), bytes_ / BW) * 1e3
    assert bound.t_sol_ms == pytest.approx(roofline)
    bf16 = definition_of({"a": (["M", "K"], "bfloat16"), "b": (["N", "K"], "bfloat16")},
                         {"c": (["M", "N"], "bfloat16")}, "def run(a, b):\n    return a @ b.t()\n",
                         {"M": m, "N": n, "K": k})
    t_bf16 = sol_time_ms(analyse(bf16, {}, convention="solar"), B200).t_sol_ms
    assert t_bf16 == pytest.approx(2 * (m * k + n * k + m * n) / BW * 1e3 + SOLAR_OVERHEAD_MS)


def test_bool_outputs_are_free_in_solar(definition_of):
    """Masks written as bool cost nothing in `solar` (as bool inputs); `strict` writes 1 B each."""
    s = 64
    ref = ("import torch\n"
           "def run(x):\n"
           "    return x > 0, x * 2\n")
    d = definition_of({"x": (["S", "S"], "float32")}, {"m": (["S", "S"], "bool"), "y": (["S", "S"], "float32")},
                      ref, {"S": s})
    solar = analyse(d, {}, convention="solar")
    assert solar.bytes_by_tensor["m"] == 0 and solar.bytes_min == 2 * s * s * 2
    strict = analyse(d, {}, convention="strict")
    assert strict.bytes_by_tensor["m"] == s * s and strict.output_bytes == s * s + s * s * 4


def test_yarn_rope_is_an_fp8_problem(sol_execbench_dir):
    """Quant/014: positions in, bf16 cos/sin out, fp8 inside: 1 B for each of seq_len positions and
    2 x 64 outputs per position, no offset."""
    problem = _problem(sol_execbench_dir, "Quant/014_fp8_yarn_rope_*")
    w = max(problem.workloads, key=lambda w: w.axes["seq_len"])
    ax = problem.definition.resolve_axes(w.axes)
    per_position = 1 + 2 * ax["qk_rope_head_dim"]
    cost = analyse_workload(problem.definition, w, convention="solar")
    assert cost.byte_width == 1.0 and cost.bytes_min == ax["seq_len"] * per_position
    assert sol_time_ms(cost, B200).t_sol_ms == pytest.approx(ax["seq_len"] * per_position / BW * 1e3)


def test_mask_preparation_writes_free_bool_masks(sol_execbench_dir):
    """L1/028 only builds two bool masks from scalars: `solar` charges nothing but the offset,
    `strict` writes both masks at 1 B an element."""
    problem = _problem(sol_execbench_dir, "L1/028_hybrid_attention_mask_*")
    w = problem.workloads[0]
    ax = problem.definition.resolve_axes(w.axes)
    mask = ax["batch_size"] * ax["num_attention_heads"] * ax["seq_length"] * ax["total_length"]
    solar = analyse_workload(problem.definition, w, convention="solar")
    assert solar.bytes_min == 0 and sol_time_ms(solar, B200).t_sol_ms == pytest.approx(SOLAR_OVERHEAD_MS)
    strict = analyse_workload(problem.definition, w, convention="strict")
    assert strict.bytes_min == 2 * mask
