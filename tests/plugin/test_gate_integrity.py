"""A kernel PR controls every file in its tree: its conftest files, ini options and plugins must not turn
a wrong kernel into a passing gate (issue 32). `pytest --solbench` refuses to gate such a tree
(solbench/gate/integrity.py); `solbench gate` (solbench/cli/gate.py) loads none of it, and its exit status
and verdict file come from solbench's own verdicts. Real subprocesses, the real runner on CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import repo_env
from tests.plugin.conftest import solution

REPO = Path(__file__).resolve().parents[2]
WRONG = "def run(x, y):\n    return x * 0.0\n"  # all zeros

FLIP_REPORTS = '''
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome, report.longrepr = "passed", None
'''
RESET_EXIT = '''
def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
'''
HARD_EXIT = '''
import os


def pytest_sessionfinish(session, exitstatus):
    os._exit(0)  # nothing after this in the process can say otherwise
'''
DESELECT = '''
def pytest_collection_modifyitems(session, config, items):
    items[:] = [item for item in items if "wrong" not in item.nodeid]
'''

# name -> files the PR adds (path relative to the project -> content)
HOSTILE_TREES = {
    "conftest_flips_reports": {"solutions/conftest.py": FLIP_REPORTS},
    "conftest_resets_exit_status": {"solutions/conftest.py": RESET_EXIT},
    "conftest_deselects_the_wrong_kernel": {"conftest.py": DESELECT},
    "ini_addopts_loads_a_plugin": {"pytest.ini": "[pytest]\naddopts = -p flipper\n", "flipper.py": FLIP_REPORTS},
    "pyproject_addopts_loads_a_plugin": {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p flipper"\n',
                                         "flipper.py": FLIP_REPORTS + RESET_EXIT},
    "conftest_names_a_plugin": {"solutions/conftest.py": 'pytest_plugins = ["flipper"]\n', "flipper.py": FLIP_REPORTS},
}


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        env.pop(name, None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def plant(project: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (project / name).write_text(text)


@pytest.mark.parametrize("tree", sorted(HOSTILE_TREES))
def test_pytest_refuses_to_gate_a_tree_that_brings_pytest_code(project, tree):
    solution(project, "wrong.py", body=WRONG)
    plant(project, HOSTILE_TREES[tree])
    result = run(project, "-m", "pytest", "-p", "solbench.pytest_plugin", "--solbench", "solutions",
                 "--solbench-device", "cpu", "--solbench-quick", "-p", "no:cacheprovider", "-q")
    assert result.returncode == 4, result.stdout[-3000:] + result.stderr[-3000:]
    assert "refusing to gate" in result.stderr and "passed" not in result.stdout, result.stderr[-2000:]


def test_pytest_still_gates_a_clean_tree_with_installed_plugins(project, fake_runner):
    """The refusal is about the tree's code only: an ordinary tree, with pytest's own and installed
    plugins loaded, gates as before (a fast stand-in runner)."""
    from tests.plugin.conftest import run_pytest

    solution(project, "good.py")
    outcome = run_pytest(project, "--solbench", "solutions")
    assert outcome.ret == 0 and set(outcome.outcomes.values()) == {"passed"}, outcome


def test_solbench_gate_fails_a_wrong_kernel_whatever_the_tree_brings(project):
    solution(project, "good.py")
    solution(project, "wrong.py", body=WRONG)
    for files in HOSTILE_TREES.values():  # all at once; a later conftest.py replaces an earlier one
        plant(project, files)
    (project / "solutions" / "conftest.py").write_text(FLIP_REPORTS + HARD_EXIT)
    (project / "out").mkdir()
    verdict_path = project / "out" / "verdict.json"
    verdict_path.write_text('{"verdict": "pass"}')  # planted by the PR: must not survive the gate
    result = run(project, "-m", "solbench", "gate", "solutions", "--problems", "problem_defs", "--device", "cpu",
                 "--quick", "--max-workloads", "1", "--verdict", "out/verdict.json")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = json.loads(verdict_path.read_text())
    assert verdict["verdict"] == "fail" and verdict["counts"].get("PASSED") == 1, verdict
    assert any(r.startswith("INCORRECT_NUMERICAL") and "wrong" in r for r in verdict["reasons"]), verdict
    assert "FAIL" in result.stderr


def test_solbench_gate_passes_a_correct_kernel_and_refuses_old_traces(project):
    solution(project, "good.py")
    result = run(project, "-m", "solbench", "gate", "solutions", "--problems", "problem_defs", "--device", "cpu",
                 "--quick", "--max-workloads", "1", "--verdict", "verdict.json", "--traces", "t.jsonl")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads((project / "verdict.json").read_text())["verdict"] == "pass"
    again = run(project, "-m", "solbench", "gate", "solutions", "--problems", "problem_defs", "--traces", "t.jsonl",
                "--verdict", "verdict.json")
    assert again.returncode == 2 and "exists" in again.stderr and not (project / "verdict.json").exists()


def test_the_verdict_rules():
    from solbench.cli.gate import decide
    from tests.report.conftest import make_trace

    passed, skipped = make_trace(status="PASSED"), make_trace(status="SKIPPED")
    assert decide([passed, skipped], 0).verdict == "pass"
    assert decide([passed, skipped], 0, require_gpu=True).verdict == "fail"
    assert decide([], 0).verdict == "fail"  # nothing evaluated is no evidence
    assert decide([passed], 1).verdict == "fail"  # the run itself failed
    assert decide([make_trace(status="INCORRECT_NUMERICAL")], 0).verdict == "fail"
    assert decide([make_trace(sol={"score": 0.8})], 0, min_score=0.5).verdict == "pass"
    assert decide([make_trace(sol={"score": 0.3})], 0, min_score=0.5).verdict == "fail"
    assert decide([passed], 0, min_score=0.5).verdict == "fail"  # no score: the gate cannot be checked
