"""The service's queue without a server: within a burst of submissions the costliest goes first (no long
problem starts last), bursts are served in order, and a cancelled one never leaves the queue for a lane."""

from __future__ import annotations

from solbench.orchestrator.config import RunConfig
from solbench.serve.submissions import BURST_S, CANCELLED, RUNNING, Submission, SubmissionBook
from solbench.spec.problem import load_problem
from tests.runner.conftest import write_problem


def submission(book: SubmissionBook, problem, at_s: float) -> Submission:
    made = Submission(book.new_id(), problem, None, RunConfig(device="cpu"), problem.workloads, submitted_s=at_s)
    book.add(made)
    return made


def test_the_costliest_of_a_burst_goes_first_and_bursts_keep_their_order(tmp_path):
    small = load_problem(write_problem(tmp_path / "p", sizes=(64,), name="small"))
    big = load_problem(write_problem(tmp_path / "p", sizes=(1 << 24,), name="big"))
    book = SubmissionBook(tmp_path / "book")
    first_burst = [submission(book, small, 100.0), submission(book, big, 100.5), submission(book, small, 101.0)]
    later_big = submission(book, big, 100.0 + BURST_S + 5)
    dropped = submission(book, big, 100.2)
    book.cancel(dropped)
    taken = [book.take(0) for _ in range(4)]
    assert [t.id for t in taken] == [first_burst[1].id, first_burst[0].id, first_burst[2].id, later_big.id]
    assert all(t.state == RUNNING and t.attempts == 1 for t in taken)
    assert dropped.state == CANCELLED and book.take(0) is None
