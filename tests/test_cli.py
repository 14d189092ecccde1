"""`solbench run` exit codes and messages: 0 all passed, 1 any failed, 2 bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.runner.conftest import write_problem, write_solution

REPO = Path(__file__).resolve().parents[1]
FAST = ["--device", "cpu", "--trials", "1", "--iters", "2", "--warmup", "1", "--no-adaptive"]


def solbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "solbench", *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_reference_passes_exit_0_and_json_traces(tmp_path):
    problem = write_problem(tmp_path)
    result = solbench("run", str(problem), "--json", *FAST)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [t["evaluation"]["status"] for t in lines] == ["PASSED", "PASSED"]
    perf = lines[0]["evaluation"]["performance"]
    assert perf["latency_ms"] > 0 and perf["latency"]["n"] >= 2
    # The reference is timed too (a false REWARD_HACK on the reference worker once dropped it).
    assert perf["reference_latency_ms"] > 0 and perf["speedup_factor"] > 0
    assert not [w for w in lines[0]["evaluation"]["warnings"] if "reference timing failed" in w]


def test_wrong_solution_exit_1_with_table(tmp_path):
    problem = write_problem(tmp_path)
    wrong = write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 - y\n")
    result = solbench("run", str(problem), "--solution", str(wrong), *FAST)
    assert result.returncode == 1
    assert "INCORRECT_NUMERICAL" in result.stdout


def test_bad_inputs_exit_2_without_traceback(tmp_path):
    problem = write_problem(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "definition.json").write_text("{not json")
    (broken / "workload.jsonl").write_text("")
    bad_dtype = write_problem(tmp_path / "dt", name="bad_dtype")
    data = json.loads((bad_dtype / "definition.json").read_text())
    data["inputs"]["x"]["dtype"] = "float7"
    (bad_dtype / "definition.json").write_text(json.dumps(data))
    cases = [
        ("run", str(tmp_path / "missing")),
        ("run", str(broken)),
        ("run", str(bad_dtype)),
        ("run", str(problem), "--solution", str(tmp_path / "nope.py")),
        ("run", str(problem), "--trials", "0"),
    ]
    for case in cases:
        result = solbench(*case, *FAST[:2])
        assert result.returncode == 2, (case, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        assert "error" in result.stderr.lower()
    assert "float7" in solbench("run", str(bad_dtype)).stderr


def test_two_problems_with_one_name_are_bad_input(tmp_path):
    write_problem(tmp_path / "a")
    write_problem(tmp_path / "b")
    result = solbench("run", str(tmp_path), *FAST)
    assert result.returncode == 2 and "two problems are named 'axpy_fp32'" in result.stderr
