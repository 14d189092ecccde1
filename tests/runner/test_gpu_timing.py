"""What a GPU trace reports beside its latency (needs a GPU; skipped without one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solbench import api
from solbench.worker.cupti_activity import load_cupti

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


def test_the_probe_draws_no_fresh_sets_once_the_block_reused_them(tmp_path, monkeypatch):
    """A slow input generator: past the block's generation budget, the escaped-work probe reuses the
    block's recent sets instead of building one per probe call (L2/034 spent minutes there). Only inputs
    that cannot be drawn into the slots (custom entrypoints) take this path on a GPU: `fillable` says no."""
    import sys
    import time

    from solbench.orchestrator.config import RunConfig
    from solbench.protocol import messages as msg
    from solbench.spec.problem import load_problem
    from solbench.spec.solution import load_solution
    from solbench.timing import timer
    from solbench.worker import calls, inputs_cache, timed_block
    from solbench.worker.state import WorkerState
    from tests.runner.conftest import write_problem, write_solution

    problem = load_problem(write_problem(tmp_path / "p", sizes=(4096,)))
    solution = load_solution(write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 + y\n"), problem.definition)
    monkeypatch.setattr(timed_block, "background_activity", lambda state: None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    built: list[float] = []
    original = inputs_cache.make_inputs

    def slow(*args, **kwargs):
        time.sleep(0.1)
        built.append(time.monotonic())
        return original(*args, **kwargs)

    monkeypatch.setattr(inputs_cache, "make_inputs", slow)
    monkeypatch.setattr(timed_block, "fillable", lambda definition, workload: False)  # as for custom inputs
    timed_until: list[int] = []
    time_iterations = timer.time_iterations

    def recording(*args, **kwargs):
        result = time_iterations(*args, **kwargs)
        timed_until.append(len(built))
        return result

    monkeypatch.setattr(timed_block, "time_iterations", recording)
    state = WorkerState("cuda")
    calls.handle_load(state, msg.Load(definition=problem.definition, solution=solution,
                                      work_dir=str(tmp_path / "w")))
    calls.handle_call(state, msg.Call(workload=problem.workloads[0], seed=3))  # threads' baseline
    built.clear()
    config = RunConfig(device="cuda", warmup=2, iters=10, adaptive=False)
    reply = timed_block.handle_time(state, msg.Time(workload=problem.workloads[0], seeds=[1, 2],
                                                    checked_outputs=1, fresh_inputs_budget_s=0.25,
                                                    config=config.timing_config("cuda")))
    assert isinstance(reply, msg.Timed) and "timed_inputs_reused" in reply.flags
    assert timed_until and len(built) == timed_until[0], (len(built), timed_until)


def test_seed_only_inputs_are_drawn_into_the_slots_fresh_for_every_call(tmp_path, monkeypatch):
    """On a GPU, random inputs are drawn straight into each call's slot: no generation budget applies,
    every call gets a new seed, the slots keep their addresses, and kept outputs match the reference
    on the inputs rebuilt from their seeds (what the judge does)."""
    import sys

    import torch

    from solbench.orchestrator.config import RunConfig
    from solbench.protocol import messages as msg
    from solbench.spec.problem import load_problem
    from solbench.spec.solution import load_solution
    from solbench.worker import calls, timed_block
    from solbench.worker.inputs_cache import make_call_inputs
    from solbench.worker.state import WorkerState
    from tests.runner.conftest import write_problem, write_solution

    problem = load_problem(write_problem(tmp_path / "p", sizes=(1 << 20,)))
    solution = load_solution(write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 + y\n"), problem.definition)
    monkeypatch.setattr(timed_block, "background_activity", lambda state: None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    state = WorkerState("cuda")
    calls.handle_load(state, msg.Load(definition=problem.definition, solution=solution,
                                      work_dir=str(tmp_path / "w")))
    workload = problem.workloads[0]
    calls.handle_call(state, msg.Call(workload=workload, seed=3))  # threads' baseline
    config = RunConfig(device="cuda", warmup=2, iters=30, adaptive=False)
    block = timed_block.TimedBlock(state, msg.Time(workload=workload, seeds=[1, 2], checked_outputs=8,
                                                   fresh_inputs_budget_s=1e-6, config=config.timing_config("cuda")))
    assert block.fill_in_place
    addresses = [[t.data_ptr() for t in inputs] for inputs, _ in block.slots]
    timing = block.measure(None)
    assert "timed_inputs_reused" not in block.flags(timing) and not block.reused
    assert [[t.data_ptr() for t in inputs] for inputs, _ in block.slots] == addresses
    seeds = [drawn[2] for _, drawn in block.stashed.values()]  # (source call, nonce, seed) per kept output
    assert len(seeds) >= 2 and len(set(seeds)) == len(seeds)
    for outs, drawn in block.stashed.values():
        _, _, args = make_call_inputs(state, workload, drawn[2])
        assert torch.equal(outs[0], args[0] * 2.0 + args[1])


VERSION_CACHE = """
_CACHE = {}


def run(x, y):
    hit = _CACHE.get(y.data_ptr())
    if hit is None or hit[0] != id(y) or hit[1] != y._version:
        hit = (id(y), y._version, y * 1.0)
        _CACHE[y.data_ptr()] = hit
    return x * 2.0 + hit[2]
"""


@pytest.mark.parametrize("slots", [8, 1])
@pytest.mark.parametrize("source,faithful,check", [("def run(x, y):\n    return x * 2.0 + y\n", True, True),
                                                   (VERSION_CACHE, False, True), (VERSION_CACHE, True, False)])
def test_a_graph_is_checked_on_fresh_values_before_it_is_timed(tmp_path, monkeypatch, source, faithful, check, slots):
    """Issue 31: a cache validated in Python (identity, data_ptr, _version) is right when launched, but a
    replay never runs the check. The graph is replayed on a set other than the capture's and compared with
    the call itself (slot 1's warm-up call on that set, or with one slot the call afterwards): an unfaithful
    graph is not timed (the block is timed as launched), a faithful one is. Blocks of trusted code
    (`check_graph_values` off: the reference's) skip the check and keep the graph."""
    import sys

    from solbench.orchestrator.config import RunConfig
    from solbench.protocol import messages as msg
    from solbench.spec.problem import load_problem
    from solbench.spec.solution import load_solution
    from solbench.worker import calls, timed_block
    from solbench.worker.state import Failure, WorkerState
    from tests.runner.conftest import write_problem, write_solution

    problem = load_problem(write_problem(tmp_path / "p", sizes=(4096,)))
    solution = load_solution(write_solution(tmp_path, source), problem.definition)
    monkeypatch.setattr(timed_block, "background_activity", lambda state: None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    state = WorkerState("cuda")
    calls.handle_load(state, msg.Load(definition=problem.definition, solution=solution,
                                      work_dir=str(tmp_path / "w")))
    workload = problem.workloads[0]
    calls.handle_call(state, msg.Call(workload=workload, seed=3))  # threads' baseline
    config = RunConfig(device="cuda", warmup=2, iters=20, adaptive=False)
    block = timed_block.TimedBlock(state, msg.Time(workload=workload, seeds=[1, 2], checked_outputs=3,
                                                   config=config.timing_config("cuda"), max_slots=slots,
                                                   check_graph_values=check))
    assert len(block.slots) == slots
    if faithful:
        block.measure(None)
        assert block.graphs is not None
        return
    with pytest.raises(Failure) as info:
        block.measure(None)
    assert info.value.capture_failed.startswith("cuda_graph_unfaithful"), info.value.capture_failed
