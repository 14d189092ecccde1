"""Faults in a solution end that workload with the right status; the run goes on.

Each solution misbehaves only on the first workload (n == 64); the second workload must PASS
in a fresh worker, proving the fault did not take the run down. The solutions of a module share one run
(and its reference worker), so a fault must not take down the other solutions' verdicts either.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from solbench import api
from solbench.orchestrator.config import RunConfig
from solbench.spec.trace import Status
from tests.runner.conftest import write_problem, write_solution

GOOD = "    return x * 2.0 + y\n"

FAULTS = {
    "segfault": ("import ctypes\n", "        ctypes.string_at(0)\n", Status.RUNTIME_ERROR, "SIGSEGV"),
    "os_exit": ("import os\n", "        os._exit(0)\n", Status.RUNTIME_ERROR, "exit code 0"),
    "raise_at_call": ("", "        raise ValueError('boom at call')\n", Status.RUNTIME_ERROR, "boom at call"),
    "infinite_loop": ("", "        while True:\n            pass\n", Status.TIMEOUT, "no reply"),
    "megabytes_of_output": ("", "        print('x' * 4_000_000)\n        raise RuntimeError('after output')\n",
                            Status.RUNTIME_ERROR, "bytes of output not kept"),
}


OTHERS = {
    "raises_at_import": "raise ImportError('broken at import')\ndef run(x, y):\n" + GOOD,
    "leaves_a_child": ("import subprocess, sys\nimport torch\n\ndef run(x, y):\n"
                       "    if x.shape[0] == 64:\n"
                       "        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n" + GOOD),
    "syntax_error": "def run(x, y:\n    return x\n",
}


def run_together(root: Path, bodies: dict[str, str], **config) -> dict[str, list]:
    """One run of every solution (a fresh worker for each, as in a run of one): the reference's worker
    and the start-up of the workers are paid once for all. Traces by solution name."""
    problem = write_problem(root / "problems")
    paths = [write_solution(root, body, f"{name}.py") for name, body in bodies.items()]
    fast = RunConfig(device="cpu", trials=2, warmup=1, iters=3, adaptive=False, timing_rounds=1, timeout_s=60)
    traces: dict[str, list] = {name: [] for name in bodies}
    for trace in api.run_dataset(problem, paths, config=replace(fast, **config)):
        traces[trace.solution].append(trace)
    return traces


@pytest.fixture(scope="module")
def fault_traces(tmp_path_factory) -> dict[str, list]:
    bodies = {fault: f"{imports}import torch\n\ndef run(x, y):\n    if x.shape[0] == 64:\n{misbehave}{GOOD}"
              for fault, (imports, misbehave, _, _) in FAULTS.items()}
    return run_together(tmp_path_factory.mktemp("faults"), bodies, timeout_s=8)


@pytest.fixture(scope="module")
def other_traces(tmp_path_factory) -> dict[str, list]:
    return run_together(tmp_path_factory.mktemp("others"), OTHERS)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_ends_workload_and_run_continues(fault_traces, fault):
    _, _, status, fragment = FAULTS[fault]
    traces = fault_traces[fault]
    assert [t.status for t in traces] == [status, Status.PASSED], [t.evaluation.log[-500:] for t in traces]
    assert fragment in traces[0].evaluation.log
    assert len(traces[0].evaluation.log) < 20_000  # logs are capped


def test_exception_at_import_fails_every_workload_cleanly(other_traces):
    traces = other_traces["raises_at_import"]
    assert [t.status for t in traces] == [Status.RUNTIME_ERROR, Status.RUNTIME_ERROR]
    assert all("broken at import" in t.evaluation.log for t in traces)


def test_leftover_child_process_is_flagged_and_killed(other_traces):
    traces = other_traces["leaves_a_child"]
    assert traces[0].status == Status.REWARD_HACK
    assert "child processes" in traces[0].evaluation.log
    assert traces[1].status == Status.PASSED


def test_syntax_error_is_a_compile_error(other_traces):
    traces = other_traces["syntax_error"]
    assert [t.status for t in traces] == [Status.COMPILE_ERROR, Status.COMPILE_ERROR]
