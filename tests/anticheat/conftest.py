"""The CPU results of the whole suite, computed once per session. Only test_suite.py uses them: under
`pytest -n N --dist loadfile` one file runs in one process, so the suite runs once, not once per process."""

from __future__ import annotations

import pytest

from tests.anticheat.suite import discover, run_cases, write_problem

CPU_CASES = [c for c in discover() if not c.gpu]


@pytest.fixture(scope="session")
def cpu_results(tmp_path_factory):
    problem = write_problem(tmp_path_factory.mktemp("anticheat_cpu"))
    return run_cases(CPU_CASES, problem, "cpu", parallel=3)
