"""Hostile cases whose catch once depended on an idle CPU (issue 20): run them with the CPU kept busy.

Two extra processes spin for the whole run, on top of whatever else the machine is doing; a defence
that relies on the OS running a released thread promptly fails here."""

from __future__ import annotations

import pytest

from solbench.spec.trace import Status
from tests.anticheat.suite import busy_cpus, discover, run_cases, write_problem

LOAD_PROCESSES = 2
CASES = ("thread_lingers", "thread_lingers_slow_exit", "hooks_thread_ident")


@pytest.fixture
def busy_cpu():
    with busy_cpus(LOAD_PROCESSES):
        yield


@pytest.mark.slow
def test_lingering_threads_are_caught_on_a_busy_cpu(tmp_path, busy_cpu):
    cases = [c for c in discover("hostile") if c.name in CASES]
    assert len(cases) == len(CASES)
    # Each case twice (two solutions' worth of timed blocks), side by side: more contention, more chances.
    results = run_cases(cases, write_problem(tmp_path), "cpu", parallel=2)
    for case in cases:
        statuses = [t.status for t in results[case.id]]
        assert statuses and all(s == Status.REWARD_HACK for s in statuses), (case.id, statuses, [
            t.evaluation.log[-800:] for t in results[case.id]])
