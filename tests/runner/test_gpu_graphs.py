"""Timing replays of CUDA graphs (`--cuda-graphs`; needs a GPU, skipped without one)."""

from __future__ import annotations

import pytest

from solbench import api
from tests.runner.conftest import write_problem, write_solution

pytestmark = pytest.mark.gpu

CHAIN = """
import torch

def run(x, y):  # three kernels, as an eager chain launches them
    doubled = x * 2.0
    summed = doubled + y
    return summed * 1.0
"""
SYNCS = """
import torch

def run(x, y):
    if float(x.abs().max().item()) < 0:  # a host sync: cannot be captured
        return y
    return x * 2.0 + y
"""
CAPTURE_AWARE = """
import torch

_seen = []

def run(x, y):
    out = x * 2.0 + y
    if torch.cuda.is_current_stream_capturing():
        return _seen[-1]  # a graph that replays nothing: stale answers for every fresh input
    _seen.append(out)
    return out
"""


def evaluate(tmp_path, body: str):
    problem = write_problem(tmp_path / "p", sizes=(1 << 14,))
    solution = write_solution(tmp_path, body)
    return api.evaluate(problem, solution, device="cuda", trials=1, max_time_s=0.3, cuda_graphs=True)


def test_a_capturable_call_is_timed_from_its_graph(tmp_path):
    trace = evaluate(tmp_path, CHAIN)[0]
    ev = trace.evaluation
    assert ev.status.value == "PASSED", ev.log
    assert "cuda_graph_unavailable" not in ev.performance.latency.flags
    assert not any(w.startswith("CUDA graph") for w in ev.warnings), ev.warnings


def test_a_call_that_cannot_be_captured_is_timed_as_launched_and_says_so(tmp_path):
    trace = evaluate(tmp_path, SYNCS)[0]
    ev = trace.evaluation
    assert ev.status.value == "PASSED", ev.log
    assert "cuda_graph_unavailable" in ev.performance.latency.flags
    assert any(w.startswith("CUDA graph: not captured") for w in ev.warnings), ev.warnings


def test_a_graph_that_skips_the_work_is_not_timed(tmp_path):
    """A capture-aware call whose graph replays nothing: its replay does not reproduce the eager call, so the
    graph is refused and the call is timed as launched, where it does its work (and its time counts)."""
    trace = evaluate(tmp_path, CAPTURE_AWARE)[0]
    ev = trace.evaluation
    assert "cuda_graph_unavailable" in ev.performance.latency.flags, ev.log
    assert any(w.startswith("CUDA graph: not captured whole") for w in ev.warnings), ev.warnings
    assert ev.status.value == "PASSED", ev.log


POISONING = """
import torch

def run(x, y):
    noise = torch.rand(x.shape, device=x.device) * 0.0  # the CUDA RNG, inside the capture
    if int(torch.count_nonzero(x > 100.0).item()) > 0:  # a host sync: the capture fails
        return y
    return x * 2.0 + y + noise
"""


def test_after_a_failed_capture_the_next_workloads_still_run(tmp_path):
    problem = write_problem(tmp_path / "p", sizes=(1 << 14, 1 << 15))
    solution = write_solution(tmp_path, POISONING)
    traces = api.evaluate(problem, solution, device="cuda", trials=1, max_time_s=0.3, cuda_graphs=True)
    assert [t.evaluation.status.value for t in traces] == ["PASSED", "PASSED"], [t.evaluation.log for t in traces]
    assert all("cuda_graph_unavailable" in t.evaluation.performance.latency.flags for t in traces)


def test_a_failed_capture_of_a_call_with_large_outputs_still_hands_them_over(tmp_path):
    """The restarted worker is a new solution process: CUDA IPC for its large outputs (128 MiB here)
    must be offered to it afresh, or the judge refuses the transfer as forged (seen on an H100)."""
    problem = write_problem(tmp_path / "p", sizes=(1 << 25,))
    solution = write_solution(tmp_path, SYNCS)
    trace = api.evaluate(problem, solution, device="cuda", trials=1, max_time_s=0.3, cuda_graphs=True)[0]
    assert trace.evaluation.status.value == "PASSED", trace.evaluation.log
    assert "cuda_graph_unavailable" in trace.evaluation.performance.latency.flags


def test_a_reference_that_cannot_be_captured_is_timed_as_launched_and_the_trace_says_so(tmp_path):
    problem = write_problem(tmp_path / "p", sizes=(1 << 14,), reference=SYNCS)
    solution = write_solution(tmp_path, CHAIN)
    ev = api.evaluate(problem, solution, device="cuda", trials=1, max_time_s=0.3)[0].evaluation  # graphs: the default
    assert ev.status.value == "PASSED", ev.log
    assert "cuda_graph_unavailable" not in ev.performance.latency.flags  # the solution's own call was captured
    assert any(w.startswith("reference timed as launched: CUDA graph not captured") for w in ev.warnings), ev.warnings
