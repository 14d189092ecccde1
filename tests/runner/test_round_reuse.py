"""A workload's second timed round starts from the first round's argument slots (and on a GPU its CUDA graphs)
in the same worker, although it warms up with fewer calls (`orchestrator.timed.later_round_timing`)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.timed import block_timing, later_round_timing
from solbench.protocol import messages as msg
from solbench.spec.problem import load_problem
from solbench.spec.solution import load_solution
from solbench.worker import calls, timed_block
from solbench.worker.state import WorkerState
from tests.runner.conftest import write_problem, write_solution


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_second_round_keeps_the_first_rounds_slots_and_graphs(tmp_path, monkeypatch, device):
    problem = load_problem(write_problem(tmp_path / "p", sizes=(1 << 16,)))
    solution = load_solution(write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 + y\n"), problem.definition)
    monkeypatch.setattr(timed_block, "background_activity", lambda state: None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    state = WorkerState(device)
    calls.handle_load(state, msg.Load(definition=problem.definition, solution=solution, work_dir=str(tmp_path / "w")))
    workload = problem.workloads[0]
    calls.handle_call(state, msg.Call(workload=workload, seed=3))  # threads' baseline
    # every call counts as long (long_call_ms 0): the calls whose slots a block keeps for the next round
    base = replace(RunConfig(device=device, iters=12, adaptive=False).timing_config(device), long_call_ms=0.0)
    first = block_timing(base, 2, 1.0, device)
    later = later_round_timing(first)
    assert later.warmup < first.warmup  # the settings differ ...

    def ask(config):
        return timed_block.handle_time(state, msg.Time(workload=workload, seeds=[1, 2], config=config,
                                                       checked_outputs=1, max_slots=4, probe=False))

    assert isinstance(ask(first), msg.Timed)
    kept = state.timed_block
    assert kept is not None, "the first round's block was not kept"
    addresses = [[t.data_ptr() for t in inputs] for inputs, _ in kept.slots]
    graphs = kept.graphs
    reply = ask(later)
    assert isinstance(reply, msg.Timed) and reply.warmup >= 1
    assert state.timed_block is kept  # ... but the block, its slots and its graphs are the same
    assert [[t.data_ptr() for t in inputs] for inputs, _ in kept.slots] == addresses
    assert kept.graphs is graphs and (device == "cpu" or graphs is not None)
    other = replace(later, iters=later.iters + 1)  # a setting the slots depend on: a block of its own
    ask(other)
    assert state.timed_block is not kept
