"""A trace's `phases_s` (orchestrator/phases.py): the parts add up to the workload's seconds, and the
judge's details sit inside `judge` without being counted twice."""

from __future__ import annotations

import pytest

from solbench import api
from solbench.orchestrator.phases import PhaseAccount, is_part
from solbench.protocol import messages as msg
from solbench.spec.trace import Correctness, Status
from tests.runner.conftest import write_solution


def test_judge_details_are_inside_judge_and_not_parts():
    account = PhaseAccount()
    judged = msg.Judged(status="PASSED", correctness=Correctness(), handler_s=0.5,
                        phases_s={"inputs": 0.1, "reference": 0.2, "compare": 0.15, "unknown": 9.0})
    account.account(msg.Judge(workload=None, seed=1, outputs=[]), judged, waited_s=0.6)
    received = msg.Received(received=[1], handler_s=0.3, phases_s={"ipc_open": 0.2, "ipc_copy": 0.05, "ipc_close": 0.4})
    account.account(msg.Receive(exports=[]), received, waited_s=0.3)
    phases = account.take()
    assert phases["judge"] == pytest.approx(0.8) and phases["channel"] == pytest.approx(0.1)
    assert phases["judge.inputs"] == 0.1 and phases["judge.reference"] == 0.2 and phases["judge.compare"] == 0.15
    assert phases["judge.receive"] == 0.3 and phases["judge.ipc_open"] == 0.2 and phases["judge.ipc_copy"] == 0.05
    assert "judge.ipc_close" not in phases  # more than the request took: not believed
    assert "judge.unknown" not in phases
    assert sum(v for k, v in phases.items() if is_part(k)) == pytest.approx(0.9)
    assert account.take() == {}


def test_a_cpu_trace_splits_its_judging_and_its_parts_add_up(problem_dir, fast_config, tmp_path):
    solution = write_solution(tmp_path, "import torch\n\ndef run(x, y):\n    return x * 2.0 + y\n")
    traces = api.evaluate(problem_dir, solution, config=fast_config)
    assert traces and all(t.status == Status.PASSED for t in traces), [t.evaluation.log[-300:] for t in traces]
    for trace in traces:
        phases, seconds = trace.evaluation.phases_s, trace.evaluation.seconds
        assert {"judge.inputs", "judge.reference", "judge.compare"} <= set(phases), phases
        inside = phases["judge.inputs"] + phases["judge.reference"] + phases["judge.compare"]
        assert inside <= phases["judge"] + 0.003, phases
        parts = sum(v for k, v in phases.items() if is_part(k))
        assert parts == pytest.approx(seconds, abs=0.001 * len(phases) + 0.002), (parts, seconds, phases)
