"""The plugin with the real runner (worker processes, CPU): pass, fail, skip, traces, and the gate
tripped by a deliberately slowed copy. Then the leaderboard and report from that run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.child_env import repo_env
from tests.plugin.conftest import solution
from tests.plugin.slow_copy import slow_copy
from tests.signals import default_sigint

REPO = Path(__file__).resolve().parents[2]
QUICK = ["--solbench-quick", "--solbench-device", "cpu", "-p", "no:cacheprovider", "-rs", "-q"]



def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runner_works(tmp_path_factory) -> None:
    """The plugin rides on `solbench run`'s code path; when that is broken here, its own tests say so."""
    from tests.runner.conftest import write_problem

    problem = write_problem(tmp_path_factory.mktemp("probe"))
    result = run(problem.parent, "-m", "solbench", "run", str(problem), "--device", "cpu", "--trials", "1",
                 "--iters", "2", "--warmup", "1", "--no-adaptive", "--max-workloads", "1")
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"`solbench run` does not work end to end in this checkout ({last})")


def test_real_run_then_slowed_copy_trips_the_gate(project, runner_works):
    solution(project, "good.py")
    solution(project, "wrong.py", body="def run(x, y):\n    return x * 2.0 - y\n")
    solution(project, "kernel.cu")
    result = run(project, "-m", "pytest", "-p", "solbench.pytest_plugin", "--solbench", "solutions", *QUICK,
                 "--solbench-traces", "out/run.jsonl", "--solbench-benchmark-json", "out/bench.json")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "2 failed, 2 passed, 2 skipped" in result.stdout
    assert "INCORRECT_NUMERICAL: wrong on axpy_fp32" in result.stdout and "axes: n=64" in result.stdout
    traces = [json.loads(line) for line in (project / "out" / "run.jsonl").read_text().splitlines()]
    assert len(traces) == 6
    assert len(json.loads((project / "out" / "bench.json").read_text())["benchmarks"]) == 2

    lb = run(project, "-m", "solbench", "leaderboard", "out/run.jsonl", "-o", "leaderboard.csv")
    assert lb.returncode == 0, lb.stderr
    report = run(project, "-m", "solbench", "report", "out/run.jsonl", "-o", "report.html")
    assert report.returncode == 0 and (project / "report.html").read_text().count("<svg") >= 3

    # The slowed copy keeps the name good.py, so the gate matches it to its recorded result.
    (project / "slowed").mkdir()
    slow_copy(project / "solutions" / "good.py", project / "slowed" / "good.py", repeat=200)
    gate = run(project, "-m", "pytest", "-p", "solbench.pytest_plugin", "--solbench", "slowed", *QUICK,
               "--solbench-baseline", "leaderboard.csv", "--solbench-max-regression", "50%")
    assert gate.returncode == 1, gate.stdout[-3000:]
    assert "regression[axpy_fp32]" in gate.stdout and "REGRESSION" in gate.stdout, gate.stdout[-3000:]
    assert "2 passed" in gate.stdout  # the slowed kernel is still correct


def test_ctrl_c_keeps_the_items_and_traces_that_finished(project, runner_works):
    """Ctrl-C while the second solution runs: the first one's items are reported (not "no tests ran"), its
    traces and pytest-benchmark entries are kept, the table is printed, and no process prints a traceback."""
    hold = project / "hold"
    hold.write_text("")
    solution(project, "a_good.py")
    solution(project, "b_held.py", body=f"import os\nimport time\n\ndef run(x, y):\n"
                                          f"    while os.path.exists({str(hold)!r}):\n        time.sleep(0.2)\n"
                                          f"    return x * 2.0 + y\n")
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    traces = project / "out" / "run.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "solbench.pytest_plugin", "--solbench", "solutions",
                             *QUICK, "--solbench-traces", str(traces), "--solbench-benchmark-json", "out/bench.json"],
                            cwd=project, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if traces.exists() and len(traces.read_text().splitlines()) >= 2:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # b_held's first workload is under way
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, out[-3000:] + err[-2000:]  # pytest's "interrupted"
    assert "2 passed" in out and "no tests ran" not in out, out[-3000:]
    assert "= solbench =" in out and "solbench: 2 workload(s) evaluated" in out
    assert "Traceback (most recent call last)" not in out + err, err[-3000:]
    assert [json.loads(line)["solution"] for line in traces.read_text().splitlines()] == ["a_good", "a_good"]
    assert len(json.loads((project / "out" / "bench.json").read_text())["benchmarks"]) == 2
