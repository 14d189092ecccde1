"""Which requests a worker follows with its integrity comparison (worker/main.py: CHECKED_AFTER)."""

from __future__ import annotations

from solbench.protocol import messages as msg
from solbench.worker import guard as worker_guard
from solbench.worker import main as worker_main
from solbench.worker.state import WorkerState

# Requests whose replies carry nothing a verdict rests on and that run no loaded code: a change made while
# one runs stays for the next checked request to find.
UNCHECKED = {"release", "ping", "trim", "receive", "shutdown"}
RUN_LOADED_CODE = {"load", "call", "judge", "inputs", "time", "time_compiled", "time_baseline"}


def test_every_request_op_is_classified_and_code_running_ones_are_checked():
    assert worker_main.CHECKED_AFTER | UNCHECKED == set(msg.REQUESTS)
    assert not worker_main.CHECKED_AFTER & UNCHECKED
    assert RUN_LOADED_CODE <= worker_main.CHECKED_AFTER


def test_a_changed_harness_fails_the_next_checked_request_not_a_ping():
    state, guard = WorkerState("cpu"), worker_guard.GuardState()
    changed = ["solbench.timing.timer.time_iterations"]
    pong = worker_main.serve_one(state, guard, lambda: changed, msg.Ping())
    assert isinstance(pong, msg.Pong)
    read = worker_main.serve_one(state, guard, lambda: changed, msg.Environment())
    assert isinstance(read, msg.Failed) and read.status == "REWARD_HACK" and changed[0] in read.log
    clean = worker_main.serve_one(state, guard, lambda: [], msg.Environment())
    assert isinstance(clean, msg.EnvironmentRead)
