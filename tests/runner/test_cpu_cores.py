"""Both CPU workers of a run on the same core, claimed so that concurrent runs take different ones
(orchestrator/cpu_cores.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from solbench import api
from solbench.orchestrator import cpu_cores
from tests.runner.conftest import write_problem

CLAIM = ("import sys; from solbench.orchestrator import cpu_cores; "
         "print(cpu_cores.env_value(cpu_cores.claim()), flush=True); sys.stdin.read()")


def _claimer() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", CLAIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def _release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=60)


def test_concurrent_claims_take_different_cores_and_a_finished_process_frees_its_own():
    """Real processes: while one holds a core the next gets another or none, and once it exits its core
    can be claimed again."""
    first, held = _claimer()
    second, other = _claimer()
    try:
        if held:
            assert int(held) in os.sched_getaffinity(0)
            assert other != held  # another core, or none left
    finally:
        _release(second)
        _release(first)
    again, reclaimed = _claimer()
    _release(again)
    if held:
        assert reclaimed  # the exits freed at least the core the first one held


def _cores_of_a_run(tmp_path) -> list[int]:
    folder = write_problem(tmp_path / "problems", sizes=(64,))
    (trace,) = api.evaluate(folder, device="cpu", quick=True, timeout_s=120)
    assert trace.status.value == "PASSED", trace.evaluation.log
    return trace.evaluation.environment.cpu_cores


def test_a_cpu_run_pins_its_workers_to_a_free_core_and_none_where_every_core_is_held(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    held = []
    while (claim := cpu_cores.claim()) is not None:  # every core free now, held by this test
        held.append(claim)
    try:
        assert _cores_of_a_run(tmp_path / "all_held") == allowed  # nothing to claim: not pinned
    finally:
        for claim in held:
            claim.release()
    cores = _cores_of_a_run(tmp_path / "released")
    assert len(cores) == 1 and cores[0] in allowed or cores == allowed  # allowed: another process held them all


@pytest.mark.parametrize("value, cores", [("1", {1}), ("0,3", {0, 3}), ("", set()), ("x", set())])
def test_the_worker_reads_the_cores_it_is_given(value, cores):
    assert cpu_cores.parse(value) == cores
