"""Faults in a solution end that workload with the right status; the run goes on.

Each solution misbehaves only on the first workload (n == 64); the second workload must PASS
in a fresh worker, proving the fault did not take the run down.
"""

from __future__ import annotations

import pytest

from solbench import api
from solbench.spec.trace import Status
from tests.runner.conftest import write_solution

GOOD = "    return x * 2.0 + y\n"

FAULTS = {
    "segfault": ("import ctypes\n", "        ctypes.string_at(0)\n", Status.RUNTIME_ERROR, "SIGSEGV"),
    "os_exit": ("import os\n", "        os._exit(0)\n", Status.RUNTIME_ERROR, "exit code 0"),
    "raise_at_call": ("", "        raise ValueError('boom at call')\n", Status.RUNTIME_ERROR, "boom at call"),
    "infinite_loop": ("", "        while True:\n            pass\n", Status.TIMEOUT, "no reply"),
    "megabytes_of_output": ("", "        print('x' * 4_000_000)\n        raise RuntimeError('after output')\n",
                            Status.RUNTIME_ERROR, "bytes of output not kept"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_ends_workload_and_run_continues(problem_dir, fast_config, fault):
    imports, misbehave, status, fragment = FAULTS[fault]
    solution = write_solution(problem_dir.parent, f"{imports}import torch\n\ndef run(x, y):\n"
                                                  f"    if x.shape[0] == 64:\n{misbehave}{GOOD}")
    fast_config.timeout_s = 8
    traces = api.evaluate(problem_dir, solution, config=fast_config)
    assert [t.status for t in traces] == [status, Status.PASSED], [t.evaluation.log[-500:] for t in traces]
    assert fragment in traces[0].evaluation.log
    assert len(traces[0].evaluation.log) < 20_000  # logs are capped


def test_exception_at_import_fails_every_workload_cleanly(problem_dir, fast_config):
    solution = write_solution(problem_dir.parent, "raise ImportError('broken at import')\ndef run(x, y):\n" + GOOD)
    traces = api.evaluate(problem_dir, solution, config=fast_config)
    assert [t.status for t in traces] == [Status.RUNTIME_ERROR, Status.RUNTIME_ERROR]
    assert all("broken at import" in t.evaluation.log for t in traces)


def test_leftover_child_process_is_flagged_and_killed(problem_dir, fast_config):
    body = ("import subprocess, sys\nimport torch\n\ndef run(x, y):\n"
            "    if x.shape[0] == 64:\n"
            "        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n" + GOOD)
    solution = write_solution(problem_dir.parent, body)
    traces = api.evaluate(problem_dir, solution, config=fast_config)
    assert traces[0].status == Status.REWARD_HACK
    assert "child processes" in traces[0].evaluation.log
    assert traces[1].status == Status.PASSED


def test_syntax_error_is_a_compile_error(problem_dir, fast_config):
    solution = write_solution(problem_dir.parent, "def run(x, y:\n    return x\n")
    traces = api.evaluate(problem_dir, solution, config=fast_config)
    assert [t.status for t in traces] == [Status.COMPILE_ERROR, Status.COMPILE_ERROR]
