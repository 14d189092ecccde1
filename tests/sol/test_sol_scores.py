"""Scores, their edge cases, the trace record and faster-than-light rejection."""

from __future__ import annotations

import math

import pytest

from solbench.sol.analyser import analyse, sol_time_ms
from solbench.sol.hardware import load_spec
from solbench.sol.record import sol_record
from solbench.sol.reject import faster_than_light, min_possible_time_ms
from solbench.sol.scores import anchored_score, log_score, problem_summary


def test_anchored_score_anchors():
    assert anchored_score(2.0, 2.0, 1.0) == 0.5  # at the baseline
    assert anchored_score(1.0, 2.0, 1.0) == 1.0  # at SOL
    assert anchored_score(1.5, 2.0, 1.0) == pytest.approx(1 / 1.5)  # half the gap closed
    assert anchored_score(4.0, 2.0, 1.0) == pytest.approx(1 / 4)  # 1 / (1 + (4-1)/(2-1))


def test_log_score_anchors():
    assert log_score(2.0, 2.0, 1.0) == 0.5
    assert log_score(1.0, 2.0, 1.0) == 1.0
    assert log_score(math.sqrt(2), 2.0, 1.0) == pytest.approx(0.75)
    assert log_score(8.0, 2.0, 1.0) == 0.0  # clamped


def test_score_edge_cases():
    assert anchored_score(None, 2.0, 1.0) == 0.0 and log_score(float("nan"), 2.0, 1.0) == 0.0  # failed
    assert anchored_score(0.5, 2.0, 1.0) == 1.0 and log_score(0.5, 2.0, 1.0) == 1.0  # beyond SOL
    assert anchored_score(1.0, None, 0.5) is None  # nothing to anchor on
    assert anchored_score(1.0, 2.0, 0.0) == pytest.approx(2 / 3)  # no bound: T_b / (T_b + T_k)
    assert log_score(1.0, 2.0, 0.0) is None
    # baseline already at the bound: matching it is full marks, slower kernels lose in proportion
    assert anchored_score(1.0, 1.0, 1.0) == 1.0 and anchored_score(2.0, 1.0, 1.2) == 0.5
    assert log_score(1.0, 1.0, 1.0) == 1.0 and log_score(2.0, 1.0, 1.0) == 0.5


def test_problem_summary_from_plain_values():
    s = problem_summary([
        {"passed": True, "score": 0.8, "log_score": 0.7, "speedup": 2.0},
        {"passed": True, "score": 0.6, "log_score": 0.5, "speedup": 8.0},
        {"passed": False, "score": 0.9, "log_score": 0.9, "speedup": 100.0},  # failed: 0, not in geomean
    ])
    assert s.workloads == 3 and s.passed == 2 and s.pass_rate == pytest.approx(2 / 3)
    assert s.mean_score == pytest.approx((0.8 + 0.6 + 0) / 3)
    assert s.mean_log_score == pytest.approx((0.7 + 0.5) / 3)
    assert s.geomean_speedup == pytest.approx(4.0)


def test_problem_summary_from_traces():
    from solbench.spec.trace import Evaluation, Performance, Status, Trace

    def trace(status, latency, score):
        ev = Evaluation(Status(status), "t", performance=Performance(latency, 2.0, 2.0 / latency),
                        sol={"score": score, "log_score": score})
        return Trace("p", {"uuid": "u"}, "s", "h", ev)

    s = problem_summary([trace("PASSED", 1.0, 0.75), trace("INCORRECT_NUMERICAL", 0.1, 0.99)])
    assert s.passed == 1 and s.mean_score == pytest.approx(0.375) and s.geomean_speedup == pytest.approx(2.0)


GEMM_REF = "import torch\ndef run(A, B):\n    return torch.matmul(A, B.T)\n"


@pytest.fixture
def big_gemm(definition_of):
    d = definition_of({"A": (["M", "K"], "bfloat16"), "B": (["N", "K"], "bfloat16")},
                      {"C": (["M", "N"], "bfloat16")}, GEMM_REF, {"M": 4096, "N": 4096, "K": 4096})
    return analyse(d, {})


def test_rejection_bound_by_hand(big_gemm):
    h100 = load_spec("H100_SXM")
    # output 32 MiB fits in the 50 MiB L2: nothing provable from bytes; FLOPs at the fastest (fp8) rate, / 2
    expected = 2 * 4096**3 / 1978.9e12 * 1e3 / 2
    assert min_possible_time_ms(big_gemm, h100) == pytest.approx(expected)
    assert faster_than_light(expected * 0.9, big_gemm, h100) is not None
    assert faster_than_light(expected * 1.01, big_gemm, h100) is None


def test_rejection_never_fires_on_a_kernel_at_datasheet_peak(big_gemm):
    for name in ("H100_SXM", "H200_SXM", "B200", "B200_BOOST", "A100_SXM"):
        hw = load_spec(name)
        peak_kernel_ms = 2 * 4096**3 / (hw.bf16_tflops * 1e12) * 1e3  # a perfect bf16 kernel
        assert faster_than_light(peak_kernel_ms, big_gemm, hw) is None


def test_rejection_message_names_time_bound_and_spec(big_gemm):
    msg = faster_than_light(1e-4, big_gemm, load_spec("B200"))
    assert msg and "B200_BOOST" in msg and "0.0001" in msg  # locked-clock spec rejects with boost rates


def test_rejection_uses_output_bytes_beyond_l2(definition_of):
    n = 1 << 26  # 256 MiB fp32 output
    d = definition_of({"a": (["N"], "float32")}, {"b": (["N"], "float32")}, "def run(a):\n    return a * 2\n",
                      {"N": n})
    cost = analyse(d, {})
    h100 = load_spec("H100_SXM")
    expected = (n * 4 - 52428800) / 3350e9 * 1e3 / 2
    assert min_possible_time_ms(cost, h100) == pytest.approx(expected)
    legit = (2 * n * 4) / 3350e9 * 1e3  # read + write at full datasheet bandwidth
    assert faster_than_light(legit, cost, h100) is None
    assert faster_than_light(expected / 2, cost, h100) is not None


def test_sol_record_fields(big_gemm):
    hw = load_spec("H100_SXM")
    bound = sol_time_ms(big_gemm, hw)
    rec = sol_record(big_gemm, bound, hw, latency_ms=0.2, baseline_ms=0.4)
    assert rec["achieved_tflops"] == pytest.approx(big_gemm.flops_total / 0.2e-3 / 1e12)
    assert rec["achieved_gbps"] == pytest.approx(big_gemm.bytes_min / 0.2e-3 / 1e9)
    assert rec["score"] == pytest.approx(anchored_score(0.2, 0.4, bound.t_sol_ms))
    assert rec["hw"] == "H100_SXM" and rec["convention"] == "strict" and rec["bound"] == "tensor"
    import json

    json.dumps(rec)  # JSON-ready


def test_an_approximate_bound_a_measurement_beats_gives_no_score(definition_of):
    """Data-dependent selection assumed dense overestimates the work: when a measured time is below
    the bound, the record says so and gives no score (it would read 1.0, "at the hardware limit")."""
    ref = ("import torch\n"
           "def run(w, x):\n"
           "    rows = torch.nonzero(x[:, 0] > 0)[:, 0]\n"
           "    out = torch.zeros(x.shape[0], w.shape[1], dtype=x.dtype)\n"
           "    out[rows] = x[rows] @ w\n"
           "    return out\n")
    definition = definition_of({"w": (["K", "N"], "float32"), "x": (["M", "K"], "float32")},
                               {"out": (["M", "N"], "float32")}, ref, {"M": 4096, "K": 4096, "N": 4096})
    cost = analyse(definition, {})
    assert cost.method == "meta-approx"
    hw = load_spec("H100_SXM")
    bound = sol_time_ms(cost, hw)
    below = sol_record(cost, bound, hw, latency_ms=bound.t_sol_ms / 4, baseline_ms=bound.t_sol_ms * 2)
    assert below["score"] is None and below["log_score"] is None
    assert any("not a lower bound" in note for note in below["notes"])
    above = sol_record(cost, bound, hw, latency_ms=bound.t_sol_ms * 1.5, baseline_ms=bound.t_sol_ms * 2)
    assert above["score"] == pytest.approx(anchored_score(bound.t_sol_ms * 1.5, bound.t_sol_ms * 2, bound.t_sol_ms))
    assert not any("not a lower bound" in note for note in above["notes"])


def test_an_exact_bound_beaten_still_scores_one(big_gemm):
    hw = load_spec("H100_SXM")
    bound = sol_time_ms(big_gemm, hw)
    rec = sol_record(big_gemm, bound, hw, latency_ms=bound.t_sol_ms / 2, baseline_ms=bound.t_sol_ms * 3)
    assert big_gemm.method == "meta" and rec["score"] == 1.0
