"""GPU faults end the workload with RUNTIME_ERROR and the run goes on (the next workload PASSES in a
fresh worker): an illegal memory access (sticky: the CUDA context is dead afterwards) and an
allocation of a terabyte. Also the CUPTI / device-synchronisation probe on real streams."""

from __future__ import annotations

import os
import statistics
import textwrap

import pytest

from solbench import api
from solbench.spec.trace import Status
from tests.anticheat.suite import busy_cpus, fast_config, write_problem

pytestmark = pytest.mark.gpu

ILLEGAL_ACCESS = '''
# solbench: problem=ac_axpy
import torch
import triton
import triton.language as tl


@triton.jit
def _bad(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    value = tl.load(x_ptr + offsets + (1 << 40))  # far outside any allocation, no mask
    tl.store(out_ptr + offsets, value, mask=offsets < n)


def run(x, y):
    out = torch.empty_like(x)
    if x.shape[0] == 64:
        _bad[(1,)](x, out, x.shape[0], BLOCK=64)
        torch.cuda.synchronize()
    return x * 2.0 + y
'''

OUT_OF_MEMORY = '''
# solbench: problem=ac_axpy
import torch


def run(x, y):
    if x.shape[0] == 64:
        torch.empty(1 << 40, dtype=torch.uint8, device=x.device)  # 1 TB
    return x * 2.0 + y
'''


@pytest.mark.parametrize("source,fragment", [(ILLEGAL_ACCESS, "illegal memory access"),
                                             (OUT_OF_MEMORY, "out of memory")], ids=["illegal_access", "oom"])
def test_gpu_fault_ends_workload_and_run_continues(tmp_path, source, fragment):
    problem = write_problem(tmp_path)
    config = fast_config("cuda")
    config.max_workloads = 2
    traces = api.evaluate_source(problem, textwrap.dedent(source), filename="fault.py", config=config)
    assert [t.status for t in traces] == [Status.RUNTIME_ERROR, Status.PASSED], [t.evaluation.log[-800:] for t in traces]
    assert fragment in traces[0].evaluation.log.lower()


def _probed(run, use_cupti: bool = True):
    """A short timed block of `run` with probe calls after it (the timer's protocol), and the probe's result."""
    from solbench.timing.config import TimingConfig
    from solbench.timing.timer import time_iterations
    from solbench.worker.probe import EscapedWorkProbe

    probe = EscapedWorkProbe(use_cupti=use_cupti)
    try:
        time_iterations(run, None, "cuda", TimingConfig.cuda(iters=10, adaptive=False), probe=probe)
    finally:
        result = probe.finish()
    return result


def _unjoined_side_stream():
    """A call that queues eight 2048^2 matmuls on a side stream the current stream never waits for; and
    that stream."""
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    side = torch.cuda.Stream()

    def unjoined(_i):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            b = a
            for _ in range(8):
                b = b @ a * 1e-3

    return unjoined, side


def test_probe_flags_unjoined_side_stream_and_accepts_joined():
    import torch

    unjoined, side = _unjoined_side_stream()

    def joined(i):
        unjoined(i)
        torch.cuda.current_stream().wait_stream(side)

    bad, good = _probed(unjoined), _probed(joined)
    assert bad.verdict() is not None, bad.to_dict()
    assert good.verdict() is None, good.to_dict()
    if bad.cupti == "used":  # cupti-python installed: the span across streams is measured too
        import statistics

        assert statistics.median(bad.span_ms) > 3 * statistics.median(bad.event_ms)
        assert max(bad.escaped_ms) > 0 and max(good.escaped_ms) <= 0.002


def test_a_tiny_unjoined_side_kernel_is_caught_every_time_with_cupti():
    """A few microseconds of side-stream work hide below any threshold on times; the marker rule sees it."""
    import torch

    from solbench.worker.cupti_activity import load_cupti

    if load_cupti() is None:
        pytest.skip("cupti-python is not installed: the tail rule alone cannot see microseconds")
    x = torch.randn(4096, device="cuda")
    side = torch.cuda.Stream()

    def tiny(_i):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.mul_(1.0)

    for _ in range(5):
        result = _probed(tiny)
        assert result.cupti == "used" and result.verdict() is not None, result.to_dict()


def test_the_tail_rule_accuses_no_joined_call_on_a_busy_host():
    """Without CUPTI the probe reads how long a synchronize waits after the end event. On a host whose
    every core is busy, a synchronize itself can cost tens of microseconds: read against a fixed floor,
    that accused honest short calls (twice in 80 workloads under a sampling profiler, on an H100). The
    rule reads the wait beyond an empty synchronize made right after, and re-probes before accusing;
    unjoined side-stream work is still caught under the same load."""
    import torch

    from solbench.worker.probe import TAIL_FLOOR_MS

    x = torch.randn(1 << 16, device="cuda")
    unjoined, _ = _unjoined_side_stream()

    def tiny(_i):
        x.mul_(1.0)

    with busy_cpus(os.cpu_count() or 2):
        honest = [_probed(tiny, use_cupti=False) for _ in range(20)]
        caught = [_probed(unjoined, use_cupti=False) for _ in range(3)]
    raw = [statistics.median(r.tail_ms) for r in honest]
    print(f"busy host, honest calls: raw median tails {min(raw):.4f}-{max(raw):.4f} ms, "
          f"{sum(t > TAIL_FLOOR_MS for t in raw)}/20 over the {TAIL_FLOOR_MS} ms floor; beyond the empty "
          f"synchronize {max(r.tail_excess_ms() for r in honest):.4f} ms at most; calls per probe "
          f"{sorted({len(r.tail_ms) for r in honest})}")
    assert [r.verdict() for r in honest] == [None] * 20, [r.to_dict() for r in honest if r.verdict()]
    assert all(r.verdict() is not None for r in caught), [r.to_dict() for r in caught]


_CONTEXT_CHURN = """
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuInit(0)
device, context = ctypes.c_int(), ctypes.c_void_p()
cuda.cuDeviceGet(ctypes.byref(device), 0)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:  # the primary context made and torn down again and again
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
    cuda.cuDevicePrimaryCtxRelease_v2(device)
"""


def test_the_tail_rule_accuses_no_honest_call_while_other_processes_start_on_the_gpu():
    """Another process creating its CUDA context on the same GPU (as a run's next worker does while the
    current solution is probed). One full-dataset run called a reference REWARD_HACK when the second round
    of probe calls followed the first at once and the median of both decided; now a second separates the
    rounds and each must accuse. Prints how many first rounds would have accused, and how many probes the
    old rule (one median over both rounds) would have accused, to show whether the disturbance bites."""
    import subprocess
    import sys

    import torch

    from solbench.worker.probe import ProbeResult

    x = torch.randn(1 << 16, device="cuda")
    unjoined, _ = _unjoined_side_stream()

    def tiny(_i):
        x.mul_(1.0)

    churn = [subprocess.Popen([sys.executable, "-c", _CONTEXT_CHURN, "90"]) for _ in range(2)]
    try:
        honest = [_probed(tiny, use_cupti=False) for _ in range(20)]
        caught = [_probed(unjoined, use_cupti=False) for _ in range(3)]
    finally:
        for process in churn:
            process.kill()
            process.wait()
    confirmed = sum(len(r.rounds) == 2 for r in honest)
    old_rule = sum(ProbeResult(event_ms=r.event_ms, tail_ms=r.tail_ms, idle_ms=r.idle_ms).verdict() is not None
                   for r in honest)
    print(f"contexts churning beside 20 honest probes: {confirmed} first rounds would have accused, the old rule "
          f"(one median over both rounds) accuses {old_rule}; largest tail excess per round "
          f"{max(max(r.round_tail_excess_ms()) for r in honest):.4f} ms")
    assert [r.verdict() for r in honest] == [None] * 20, [r.to_dict() for r in honest if r.verdict()]
    assert all(r.verdict() is not None for r in caught), [r.to_dict() for r in caught]
