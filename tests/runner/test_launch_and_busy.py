"""The host-launch and GPU-busy figures a trace takes from the solution's worker replies."""

from __future__ import annotations

from solbench.orchestrator.verdict import launch_and_busy_ms


def test_medians_of_plain_numbers_and_only_probes_that_used_cupti():
    probes = [{"cupti": "used", "span_ms": [0.02, 0.04], "kernel_ms": [0.01, 0.03]},
              {"cupti": "unavailable", "span_ms": [9.0], "kernel_ms": [9.0]},
              {"cupti": "used", "span_ms": [0.03], "kernel_ms": [0.02]}]
    host, busy, kernels = launch_and_busy_ms([0.1, 0.3, "x", float("nan"), -1.0, 0.2], probes)
    assert host == 0.2 and busy == 0.03 and kernels == 0.02


def test_nothing_usable_gives_none():
    assert launch_and_busy_ms([], [{"cupti": "failed: no"}]) == (None, None, None)


def test_busy_time_is_the_union_of_the_calls_gpu_work():
    from solbench.worker.cupti_activity import union_ns

    assert union_ns([]) == 0
    assert union_ns([(0, 10), (20, 30)]) == 20  # a gap is not busy
    assert union_ns([(0, 10), (5, 15), (12, 13)]) == 15  # overlapping streams count once
    assert union_ns([(20, 30), (0, 25)]) == 30


def test_busy_prefers_the_union_over_the_span():
    probes = [{"cupti": "used", "span_ms": [19000.0], "busy_ms": [70.0], "kernel_ms": [69.0]}]
    assert launch_and_busy_ms([450.0], probes) == (450.0, 70.0, 69.0)
