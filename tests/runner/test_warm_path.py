"""The warm path (issue 49): kept workers keep the reference loaded from one call to the next only while the
problem's content is the same, and the reference's preparation beside a trial never overlaps a timed block."""

from __future__ import annotations

import time

import pytest

from solbench import api
from solbench.orchestrator.process import WorkerProcess
from solbench.orchestrator.reuse_key import load_key
from solbench.spec.problem import load_problem
from solbench.spec.solution import reference_solution
from solbench.spec.trace import Status
from tests.runner.conftest import write_problem, write_solution

GOOD = "def run(x, y):\n    return x * 2.0 + y\n"


@pytest.fixture
def requests_sent(monkeypatch) -> list[tuple[str, str, float, float]]:
    """(worker role, request, sent, answered) of every request a worker served, in the order they ended."""
    sent: list[tuple[str, str, float, float]] = []
    original = WorkerProcess.request

    def request(self, message, timeout_s):
        started = time.monotonic()
        try:
            return original(self, message, timeout_s)
        finally:
            sent.append((self.role, message.OP, started, time.monotonic()))

    monkeypatch.setattr(WorkerProcess, "request", request)
    return sent


def reference_loads(sent) -> int:
    return sum(1 for role, op, _, _ in sent if role == "reference" and op == "load")


def test_the_load_key_is_the_content_not_the_problem_object(tmp_path):
    folder = write_problem(tmp_path)
    first, again = load_problem(folder), load_problem(folder)
    solution = reference_solution(first.definition)
    assert load_key(first, solution, [folder]) == load_key(again, reference_solution(again.definition), [folder])
    assert load_key(first, solution, [folder]) != load_key(first, solution, [folder, tmp_path])  # other data roots
    other = load_problem(write_problem(tmp_path / "other", reference="def run(x, y):\n    return x * 3.0 + y\n"))
    assert load_key(other, reference_solution(other.definition), [folder]) != load_key(first, solution, [folder])


def test_kept_workers_keep_the_reference_loaded_only_for_the_same_content_and_prepare_nothing_beside_timing(
        problem_dir, fast_config, tmp_path, requests_sent):
    solution = write_solution(tmp_path, GOOD)
    definition = problem_dir / "definition.json"
    honest = definition.read_text()
    with api.Evaluator(config=fast_config) as evaluator:
        def statuses() -> list[Status]:
            return [t.evaluation.status for t in evaluator.evaluate(problem_dir, solution)]

        assert statuses() == [Status.PASSED] * 2
        loads = reference_loads(requests_sent)
        assert statuses() == [Status.PASSED] * 2
        assert reference_loads(requests_sent) == loads  # the same content: the reference stays loaded
        definition.write_text(honest.replace("2.0", "3.0"))  # the same name and folder, another reference
        assert statuses() == [Status.INCORRECT_NUMERICAL] * 2
        assert reference_loads(requests_sent) == loads + 1
        definition.write_text(honest)
        assert statuses() == [Status.PASSED] * 2
        assert reference_loads(requests_sent) == loads + 2
    # The reference builds a trial's inputs while the solution runs the trial (CPU); never while a block is timed.
    prepared = [(start, end) for role, op, start, end in requests_sent if role == "reference" and op == "inputs"]
    timed = [(start, end) for role, op, start, end in requests_sent if op == "time"]
    assert prepared and timed
    assert not [(p, t) for p in prepared for t in timed if p[0] < t[1] and t[0] < p[1]]
