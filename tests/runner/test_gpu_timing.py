"""What a GPU trace reports beside its latency (needs a GPU; skipped without one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solbench import api
from solbench.check.cupti_activity import load_cupti

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("solution", [None, "solutions/gemm_n4096_k4096/torch_gemm.py"])
def test_trace_has_host_launch_and_busy_times(solution):
    traces = api.evaluate(ROOT / "problem_defs/core/gemm_n4096_k4096", ROOT / solution if solution else None,
                          device="cuda", max_workloads=1, trials=1, max_time_s=0.5)
    trace = traces[0]
    ev = trace.evaluation
    assert ev.status.value == "PASSED", ev.log
    perf = ev.performance
    assert perf.host_launch_ms is not None and perf.host_launch_ms > 0
    if load_cupti() is not None:
        assert perf.gpu_busy_ms is not None, (ev.warnings, ev.log)
        assert 0 < perf.gpu_busy_ms < 3 * perf.latency_ms + 0.05
        assert perf.kernel_sum_ms is not None and perf.kernel_sum_ms > 0  # may exceed the span: kernels overlap
        # the probe calls run on a flushed L2 like the timed ones, so the busy time is not a cache-hot figure
        assert perf.gpu_busy_ms > 0.5 * perf.latency_ms, perf
