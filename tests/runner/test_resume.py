"""Killing a run with SIGKILL and running it again loses nothing and duplicates nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from solbench.report.traces import TraceFile
from tests.child_env import repo_env
from tests.runner.conftest import write_problem, write_solution

REPO = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], **kwargs) -> subprocess.Popen:
    env = repo_env(REPO)
    return subprocess.Popen([sys.executable, "-m", "solbench", *args], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)


def uuids(path: Path) -> list[str]:
    return [json.loads(line)["workload"]["uuid"] for line in path.read_text().splitlines() if line.strip()]


def test_sigkill_then_rerun_resumes_without_loss_or_duplicates(tmp_path):
    problem = write_problem(tmp_path / "p", sizes=(64, 80, 96, 112, 128, 144))
    solution = write_solution(tmp_path, "import time\nimport torch\n\ndef run(x, y):\n"
                                        "    time.sleep(0.3)\n    return x * 2.0 + y\n")
    traces = tmp_path / "traces.jsonl"
    args = ["run", str(problem), "--solution", str(solution), "-o", str(traces), "--device", "cpu",
            "--trials", "1", "--iters", "2", "--warmup", "1", "--no-adaptive", "--no-reference-timing"]
    proc = run_cli(args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if traces.exists() and len(uuids(traces)) >= 2:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = uuids(traces)
    assert 2 <= len(before) < 6, "the kill should land mid-run"
    # A line someone else wrote (a forged PASSED for a workload not run yet, signature copied) is refused.
    forged = traces.read_text().splitlines()[-1]
    forged = forged.replace(f'"uuid":"{before[-1]}"', '"uuid":"w5-144"').replace('"status":"INCORRECT_NUMERICAL"',
                                                                                 '"status":"PASSED"')
    assert "w5-144" in forged and "w5-144" not in before
    # A write cut short by the kill must not poison the file: simulate one.
    with open(traces, "a") as f:
        f.write(forged + "\n")
        f.write('{"schema": "solbench.trace/1", "definition": "axpy')
    rerun = run_cli(args)
    output = rerun.communicate(timeout=300)[0].decode()
    assert rerun.returncode == 0, output
    after = uuids(traces)
    assert sorted(after) == sorted(set(after)), "no duplicates"
    assert len(after) == 6
    assert after[: len(before)] == before, "finished results are kept as they were"
    assert "resuming" in output
    assert "refused" in output and "w5-144" in Path(f"{traces}.refused").read_text()


def test_trace_file_drops_partial_line_and_keeps_complete_ones(tmp_path):
    path = tmp_path / "t.jsonl"
    good = {"schema": "solbench.trace/1", "definition": "d", "workload": {"uuid": "u1"}, "solution": "s",
            "solution_hash": "h", "evaluation": {"status": "PASSED", "timestamp": "t"}}
    path.write_text(json.dumps(good) + "\n" + '{"definition": "d", "workl')
    trace_file = TraceFile(path)
    assert trace_file.is_done("d", "h", "u1")
    assert path.read_text().endswith("}\n")
    assert trace_file.done_count == 1
