"""GPU faults end the workload with RUNTIME_ERROR and the run goes on (the next workload PASSES in a
fresh worker): an illegal memory access (sticky: the CUDA context is dead afterwards) and an
allocation of a terabyte. Also the CUPTI / device-synchronisation probe on real streams."""

from __future__ import annotations

import textwrap

import pytest

from solbench import api
from solbench.spec.trace import Status
from tests.anticheat.suite import fast_config, write_problem

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


def test_probe_flags_unjoined_side_stream_and_accepts_joined():
    import torch

    from solbench.worker.probe import probe

    a = torch.randn(2048, 2048, device="cuda")
    side = torch.cuda.Stream()

    def unjoined(_i):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            b = a
            for _ in range(8):
                b = b @ a * 1e-3

    def joined(i):
        unjoined(i)
        torch.cuda.current_stream().wait_stream(side)

    bad = probe(lambda i: None, unjoined, 0)
    good = probe(lambda i: None, joined, 0)
    assert bad.verdict() is not None, bad.to_dict()
    assert good.verdict() is None, good.to_dict()
    if bad.cupti == "used":  # cupti-python installed: the span across streams is measured too
        import statistics

        assert statistics.median(bad.span_ms) > 3 * statistics.median(bad.event_ms)
        assert max(bad.event_ms) < 10 * statistics.median(bad.event_ms)  # CUPTI's start-up cost is not in a call
