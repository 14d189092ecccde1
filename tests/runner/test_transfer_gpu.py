"""CUDA IPC of large outputs between the two workers of one GPU (solbench.worker.transfer).

    python -m pytest -q -m gpu tests/runner/test_transfer_gpu.py

Skipped without CUDA. The protocol's CPU-checkable parts (validation, fallback order) are in
test_transfer.py.
"""

from __future__ import annotations

import copy

import pytest

from solbench import api
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.session import DeviceSession
from solbench.protocol import descriptors as transfer
from solbench.protocol import messages as msg
from solbench.spec.problem import load_problem
from solbench.spec.solution import load_solution, reference_solution
from solbench.spec.trace import Status
from tests.runner.conftest import write_problem, write_solution

pytestmark = pytest.mark.gpu

N = 8 << 20  # float32 elements: a 32 MiB output, above the 1 MiB threshold the tests use
GOOD = "import torch\n\ndef run(x, y):\n    return x * 2.0 + y\n"


@pytest.fixture
def big_problem(tmp_path):
    return write_problem(tmp_path / "problems", sizes=(N,))


@pytest.fixture
def config():
    return RunConfig(device="cuda:0", trials=2, warmup=1, iters=3, adaptive=False, timing_rounds=1,
                     checked_timed_outputs=2, time_reference=False, timeout_s=300, ipc_min_bytes=1 << 20)


@pytest.fixture
def requests(monkeypatch):
    """Every request the orchestrator makes, as (worker role, message)."""
    seen: list[tuple[str, dict]] = []
    original = DeviceSession.ask

    def recording(self, worker, message, timeout_s):
        seen.append(("solution" if worker is self.candidate else "reference", message))
        return original(self, worker, message, timeout_s)

    monkeypatch.setattr(DeviceSession, "ask", recording)
    return seen


def ops(requests) -> list[str]:
    return [f"{role}:{message.OP}" for role, message in requests]


def test_large_outputs_travel_by_ipc_and_pass(big_problem, config, requests):
    solution = write_solution(big_problem.parent, GOOD)
    trace = api.evaluate(big_problem, solution, config=config)[0]
    assert trace.status == Status.PASSED, trace.evaluation.log
    seen = ops(requests)
    judged = seen.count("reference:judge")
    assert judged >= config.trials + 2
    assert seen.count("reference:receive") == judged and seen.count("solution:release") == judged
    assert "solution:fetch" not in seen
    phases = trace.evaluation.phases_s  # the transfer's cost, inside `judge`
    assert {"judge.receive", "judge.ipc_open", "judge.ipc_copy", "judge.ipc_close", "judge.release"} <= set(phases)
    assert not any("transfer:" in w or "ctypes" in w for w in trace.evaluation.warnings), trace.evaluation.warnings
    for role, message in requests:
        offered = getattr(message, "ipc_min_bytes", None) is not None
        assert offered == (role == "solution" and message.OP in ("call", "time"))


@pytest.mark.parametrize("body, status", [
    ("    return x * 2.0 + y + 1e-2\n", Status.INCORRECT_NUMERICAL),
    ("    out = torch.empty(2 * x.numel(), device=x.device)[::2]\n    out.copy_(x * 2.0 + y)\n    return out\n",
     Status.PASSED),  # a strided output: exported as a contiguous copy
])
def test_what_arrives_by_ipc_is_judged(big_problem, config, requests, body, status):
    solution = write_solution(big_problem.parent, "import torch\n\ndef run(x, y):\n" + body)
    trace = api.evaluate(big_problem, solution, config=config)[0]
    assert trace.status == status, trace.evaluation.log
    assert "reference:receive" in ops(requests)


def test_when_the_reference_worker_cannot_open_a_handle_bytes_carry_the_outputs(big_problem, config, monkeypatch):
    original = DeviceSession.ask
    seen = []

    def elsewhere(self, worker, message, timeout_s):
        seen.append(message.OP)
        if message.OP == "receive":  # as if exported on another GPU
            message = msg.Receive(exports=[dict(copy.deepcopy(e), device="uuid:another-gpu") for e in message.exports])
        return original(self, worker, message, timeout_s)

    monkeypatch.setattr(DeviceSession, "ask", elsewhere)
    solution = write_solution(big_problem.parent, GOOD)
    trace = api.evaluate(big_problem, solution, config=config)[0]
    assert trace.status == Status.PASSED, trace.evaluation.log
    assert seen.count("receive") == 1 and "fetch" in seen  # then bytes for the rest of this solution
    assert any(w.startswith("transfer: CUDA IPC unavailable") for w in trace.evaluation.warnings)


def test_allocations_that_cannot_be_exported_go_as_bytes(big_problem, config, requests, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    solution = write_solution(big_problem.parent, GOOD)
    trace = api.evaluate(big_problem, solution, config=config)[0]
    assert trace.status == Status.PASSED, trace.evaluation.log  # by IPC or by bytes, whichever the driver allows


@pytest.fixture
def workers(big_problem, config):
    problem = load_problem(big_problem)
    session = DeviceSession("cuda:0", config)
    session.load(session.reference, problem, reference_solution(problem.definition))
    solution = load_solution(write_solution(big_problem.parent, GOOD), problem.definition)
    session.load(session.candidate, problem, solution)
    yield session, problem
    session.close()


def test_the_reference_worker_refuses_forged_ranges_and_stays_usable(workers):
    session, problem = workers
    wdata = problem.workloads[0]
    reference, candidate = session.reference.request, session.candidate.request
    reply = candidate(msg.Call(workload=wdata, seed=5, ipc_min_bytes=1 << 20), 300)
    good = reply.outputs[0]
    assert transfer.is_descriptor(good) and good["nbytes"] == N * 4
    forgeries = {
        "past the allocation": dict(good, offset=1 << 40),
        "longer than the allocation": dict(good, shape=[N * 64], nbytes=N * 64 * 4),
        "reading before the copy (negative offset)": dict(good, offset=-4096),
    }
    for what, forged in forgeries.items():
        answer = reference(msg.Receive(exports=[forged]), 300)
        assert answer.transfer_error == "forged", (what, answer)
    answer = reference(msg.Receive(exports=[dict(good, handle="5a" * 64)]), 300)
    assert answer.transfer_error == "unavailable" and answer.healthy is True, answer
    answer = reference(msg.Receive(exports=[good]), 300)
    assert answer.received == [good[transfer.IPC_KEY]], answer
    assert candidate(msg.Release(exports=[good[transfer.IPC_KEY]]), 60).held == 0
    verdict = reference(msg.Judge(workload=wdata, seed=5, outputs=[{transfer.RECEIVED_KEY: good[transfer.IPC_KEY]}]), 300)
    assert isinstance(verdict, msg.Judged) and verdict.status == "PASSED", verdict
    # a copy is judged once; a second judge naming it fails in the reference worker
    again = reference(msg.Judge(workload=wdata, seed=5, outputs=[{transfer.RECEIVED_KEY: good[transfer.IPC_KEY]}]), 300)
    assert isinstance(again, msg.Failed)
