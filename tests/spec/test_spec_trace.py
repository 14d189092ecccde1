"""Traces: round trips through dicts and strict JSON, and reading SOL-ExecBench's layout."""

from __future__ import annotations

import json
import math

import pytest

from solbench.spec import (
    Correctness,
    Environment,
    Evaluation,
    LatencyStats,
    Performance,
    SpecError,
    Status,
    Trace,
)
from solbench.spec.trace import TRACE_SCHEMA

WORKLOAD = {"uuid": "w-1", "axes": {"m": 4}, "inputs": {"x": {"type": "random"}},
            "tolerance": {"max_atol": 0.01, "max_rtol": 0.01, "required_matched_ratio": 0.99,
                          "max_error_cap": None, "allow_negative_inf": False}}


def stats(median: float) -> LatencyStats:
    return LatencyStats(median_ms=median, mean_ms=median * 1.1, min_ms=median * 0.9, max_ms=median * 2,
                        stdev_ms=0.01, n=50, ci_low_ms=median * 0.95, ci_high_ms=median * 1.05, ci_level=0.95,
                        iqr_ms=0.02, warmup=10, method="cuda_events", flags=["wide_ci"])


def passed_trace() -> Trace:
    evaluation = Evaluation(
        status=Status.PASSED, timestamp="2026-01-01T00:00:00+00:00", log="ok",
        environment=Environment(device="cuda", hardware="NVIDIA H100 80GB HBM3", driver="570.1", cuda="12.8",
                                torch="2.13.0", triton="3.9.0", python="3.11.7", hostname="box",
                                clocks_start={"sm_mhz": 1980}, clocks_end={"sm_mhz": 1755}),
        correctness=Correctness(max_absolute_error=1e-3, max_relative_error=2e-3, matched_ratio=0.999, trials=3,
                                checked_timed_iterations=2, output="y"),
        performance=Performance(latency_ms=0.5, reference_latency_ms=1.0, speedup_factor=2.0,
                                latency=stats(0.5), reference_latency=stats(1.0)),
        sol={"sol_ms": 0.25, "score": 0.5}, warnings=["static: uses torch.cuda.synchronize"], seconds=3.5)
    return Trace("scale_rows", WORKLOAD, "mul_v1", "0123456789abcdef", evaluation)


def test_round_trip_dict():
    trace = passed_trace()
    data = trace.to_dict()
    assert data["schema"] == TRACE_SCHEMA == "solbench.trace/2"
    assert data["evaluation"]["status"] == "PASSED"
    assert Trace.from_dict(data) == trace


def test_round_trip_strict_json():
    trace = passed_trace()
    line = json.dumps(trace.to_dict(), allow_nan=False)
    assert "\n" not in line  # one object per line
    assert Trace.from_dict(json.loads(line)) == trace


def test_environment_also_written_in_sol_execbench_shape():
    env = passed_trace().to_dict()["evaluation"]["environment"]
    assert env["hardware"] == "NVIDIA H100 80GB HBM3"
    assert env["libs"] == {"torch": "2.13.0", "triton": "3.9.0", "cuda": "12.8"}


def test_trace_accessors():
    trace = passed_trace()
    assert trace.status is Status.PASSED
    assert trace.workload_uuid == "w-1"
    assert trace.key() == ("scale_rows", "0123456789abcdef", "w-1")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_errors_become_null(bad):
    evaluation = Evaluation(Status.INCORRECT_NUMERICAL, "t",
                            correctness=Correctness(max_absolute_error=bad, max_relative_error=bad, matched_ratio=0.5,
                                                    has_nan=math.isnan(bad), has_inf=math.isinf(bad)))
    data = Trace("d", WORKLOAD, "s", "h", evaluation).to_dict()
    line = json.dumps(data, allow_nan=False)
    back = json.loads(line)["evaluation"]["correctness"]
    assert back["max_absolute_error"] is None and back["max_relative_error"] is None
    again = Trace.from_dict(json.loads(line))
    assert again.evaluation.correctness.max_absolute_error is None
    assert again.evaluation.performance is None


def test_non_finite_performance_is_strict_json():
    perf = Performance(latency_ms=0.5, reference_latency_ms=0.0, speedup_factor=float("inf"),
                       latency=LatencyStats(0.5, 0.5, 0.5, 0.5, float("nan"), 1))
    trace = Trace("d", WORKLOAD, "s", "h", Evaluation(Status.PASSED, "t", performance=perf,
                                                      correctness=Correctness()))
    json.dumps(trace.to_dict(), allow_nan=False)


def test_status_values():
    names = {s.value for s in Status}
    # SOL-ExecBench's statuses, plus solbench's additions
    assert {"PASSED", "INCORRECT_SHAPE", "INCORRECT_DTYPE", "INCORRECT_NUMERICAL", "RUNTIME_ERROR",
            "COMPILE_ERROR", "TIMEOUT", "REWARD_HACK", "INVALID_REFERENCE", "MISSING_DATA", "SKIPPED"} <= names
    assert str(Status.TIMEOUT) == "TIMEOUT"
    assert Status("PASSED") is Status.PASSED


def test_skipped_is_not_a_failure():
    assert not Status.PASSED.failed and not Status.SKIPPED.failed
    assert all(s.failed for s in Status if s not in (Status.PASSED, Status.SKIPPED))


def test_unknown_status():
    data = passed_trace().to_dict()
    data["evaluation"]["status"] = "GREAT"
    with pytest.raises(SpecError, match="unknown status 'GREAT'"):
        Trace.from_dict(data)


@pytest.mark.parametrize("key", ["definition", "workload", "evaluation"])
def test_missing_keys(key):
    data = passed_trace().to_dict()
    del data[key]
    with pytest.raises(SpecError, match=key):
        Trace.from_dict(data)


def test_workload_without_uuid():
    data = passed_trace().to_dict()
    data["workload"] = {"axes": {}}
    with pytest.raises(SpecError, match="workload.uuid: is missing"):
        Trace.from_dict(data)


def test_not_an_object():
    with pytest.raises(SpecError, match="must be an object, got \\[\\]"):
        Trace.from_dict([])  # type: ignore[arg-type]


def test_reads_sol_execbench_trace():
    """A trace as SOL-ExecBench writes it: no schema, no stats, solution name, extra correctness fields."""
    data = {
        "definition": "003_fused_add_rmsnorm_h7168",
        "workload": {"uuid": "c4831914", "axes": {"batch_size": 7}, "inputs": {}, "tolerance": {}},
        "solution": "my_kernel",
        "evaluation": {
            "status": "PASSED",
            "environment": {"hardware": "NVIDIA B200", "libs": {"torch": "2.9.0"}},
            "timestamp": "2026-01-01T00:00:00",
            "log": "",
            "correctness": {"max_relative_error": 0.001, "max_absolute_error": 0.002, "has_nan": False,
                            "has_inf": False, "extra": {"something": 1}},
            "performance": {"latency_ms": 0.01, "reference_latency_ms": 0.02, "speedup_factor": 2.0},
        },
    }
    trace = Trace.from_dict(data)
    assert trace.schema == TRACE_SCHEMA
    assert trace.solution == "my_kernel" and trace.solution_hash == ""
    assert trace.status is Status.PASSED
    assert trace.evaluation.environment.hardware == "NVIDIA B200"
    assert trace.evaluation.correctness.max_absolute_error == 0.002
    assert trace.evaluation.performance.speedup_factor == 2.0
    assert trace.evaluation.performance.latency is None


def test_reads_sol_execbench_libs():
    env = Environment.from_dict({"hardware": "NVIDIA B200", "libs": {"torch": "2.9.0", "cuda": "12.9"}})
    assert (env.torch, env.cuda) == ("2.9.0", "12.9")


def test_null_evaluation_is_spec_error():
    data = passed_trace().to_dict()
    data["evaluation"] = None
    with pytest.raises(SpecError):
        Trace.from_dict(data)
