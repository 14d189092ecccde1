"""The host-launch and GPU-busy figures a trace takes from the solution's worker replies."""

from __future__ import annotations

from solbench.runner.evaluate import launch_and_busy_ms


def test_medians_of_plain_numbers_and_only_probes_that_used_cupti():
    probes = [{"cupti": "used", "span_ms": [0.02, 0.04], "kernel_ms": [0.01, 0.03]},
              {"cupti": "unavailable", "span_ms": [9.0], "kernel_ms": [9.0]},
              {"cupti": "used", "span_ms": [0.03], "kernel_ms": [0.02]}]
    host, busy, kernels = launch_and_busy_ms([0.1, 0.3, "x", float("nan"), -1.0, 0.2], probes)
    assert host == 0.2 and busy == 0.03 and kernels == 0.02


def test_nothing_usable_gives_none():
    assert launch_and_busy_ms([], [{"cupti": "failed: no"}]) == (None, None, None)
