"""A kernel PR controls every file in its tree: its pytest configuration, conftest files, plugins, `.pth`
and `sitecustomize` files must not turn a wrong kernel into a passing gate (issues 32 and 47). Both doors
decide in a process the tree cannot configure: `pytest --solbench` hands the gate to a clean pytest session
(solbench/gate/clean_session.py) and says what it ignored; `solbench gate` (solbench/cli/gate.py) starts no
pytest. Real subprocesses, the real runner on CPU. Hostile trees are packed, several to a project where
their files do not collide, so that each costly run judges several of them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import repo_env
from tests.plugin.conftest import solution
from tests.runner.conftest import write_problem

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
DELETES_ITS_FILE = "del __file__  # a plugin the old check could not locate, so did not count\n"
CLAIMS_STDLIB = "import json\n\n__file__ = json.__file__  # a plugin that says it is the standard library\n"
CLAIMS_PYTEST_WHILE_COLLECTING = '''
import pytest as _pytest


def pytest_collect_file(file_path, parent):  # runs before the old check, at the end of collection
    globals()["__file__"] = _pytest.__file__
'''
EXIT_AT_START = "import os\nos._exit(0)\n"  # whatever imports it ends with status 0

# name -> files the PR adds (path relative to the project -> content)
HOSTILE_TREES = {
    "conftest_flips_reports": {"solutions/conftest.py": FLIP_REPORTS},
    "conftest_resets_exit_status": {"solutions/conftest.py": RESET_EXIT},
    "conftest_deselects_the_wrong_kernel": {"conftest.py": DESELECT},
    "ini_addopts_loads_a_plugin": {"pytest.ini": "[pytest]\naddopts = -p flipper\n", "flipper.py": FLIP_REPORTS},
    "pyproject_addopts_loads_a_plugin": {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p flipper"\n',
                                         "flipper.py": FLIP_REPORTS + RESET_EXIT},
    "conftest_names_a_plugin": {"conftest.py": 'pytest_plugins = ["flipper"]\n', "flipper.py": FLIP_REPORTS},
    # issue 47, finding 3
    "pyproject_plugin_deletes_its_file": {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p vanisher"\n',
                                          "vanisher.py": FLIP_REPORTS + RESET_EXIT + DELETES_ITS_FILE},
    "setup_cfg_plugin_claims_a_stdlib_file": {"setup.cfg": "[tool:pytest]\naddopts = -p impostor\n",
                                              "impostor.py": FLIP_REPORTS + RESET_EXIT + CLAIMS_STDLIB},
    "conftest_claims_pytests_file_while_collecting": {
        "solutions/conftest.py": FLIP_REPORTS + RESET_EXIT + CLAIMS_PYTEST_WHILE_COLLECTING},
    "pth_and_sitecustomize_in_the_tree": {"sitecustomize.py": EXIT_AT_START, "usercustomize.py": EXIT_AT_START,
                                          "solbench_hook.pth": "import os; os._exit(0)\n",
                                          "solutions/sitecustomize.py": EXIT_AT_START},
    "test_module_and_doctest_beside_the_solutions": {"solutions/test_exit.py": EXIT_AT_START,
                                                     "solutions/test_exit.txt": ">>> import os; os._exit(0)\n"},
}
CONFIG_FILES = {"pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"}  # pytest reads one: they collide


def packed(trees: dict[str, dict[str, str]]) -> list[list[str]]:
    """The trees in groups whose files do not collide (one pytest configuration file per group)."""
    groups: list[tuple[list[str], set[str]]] = []
    for name in sorted(trees):
        slots = {"config" if path in CONFIG_FILES else path for path in trees[name]}
        group = next((g for g in groups if not g[1] & slots), None)
        if group is None:
            groups.append(([], set()))
            group = groups[-1]
        group[0].append(name)
        group[1].update(slots)
    return [names for names, _ in groups]


GROUPS = packed(HOSTILE_TREES)


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        env.pop(name, None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def plant(project: Path, names: list[str]) -> None:
    for name in names:
        for path, text in HOSTILE_TREES[name].items():
            (project / path).write_text(text)


@pytest.fixture(scope="module")
def hostile_projects(tmp_path_factory) -> list[Path]:
    """One project per group of hostile trees, each with an all-zeros kernel and a correct one."""
    projects = []
    for index, names in enumerate(GROUPS):
        project = tmp_path_factory.mktemp(f"hostile{index}")
        write_problem(project / "problem_defs")
        (project / "solutions").mkdir()
        solution(project, "good.py")
        solution(project, "wrong.py", body=WRONG)
        plant(project, names)
        projects.append(project)
    return projects


def test_every_hostile_tree_is_packed_and_each_group_has_one_pytest_configuration():
    assert sorted(n for names in GROUPS for n in names) == sorted(HOSTILE_TREES)
    for names in GROUPS:
        assert len([p for n in names for p in HOSTILE_TREES[n] if p in CONFIG_FILES]) <= 1, names


@pytest.mark.parametrize("group", range(len(GROUPS)), ids=["+".join(names) for names in GROUPS])
def test_pytest_fails_a_wrong_kernel_whatever_the_tree_brings(hostile_projects, group):
    project = hostile_projects[group]
    result = run(project, "-m", "pytest", "-p", "solbench.pytest_plugin", "--solbench", "solutions",
                 "--solbench-device", "cpu", "--solbench-quick", "--solbench-max-workloads", "1", "-q", "-rA")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-4000:]
    assert "1 failed, 1 passed" in result.stdout, output[-4000:]
    assert "FAILED solutions/wrong.py::axpy_fp32[n=64]" in result.stdout and "INCORRECT_NUMERICAL" in result.stdout
    brought = {p for n in GROUPS[group] for p in HOSTILE_TREES[n]}
    ignored = result.stdout.split("ignored from the tree under test: ", 1)[-1].splitlines()[0]
    for config in brought & CONFIG_FILES:
        assert f"pytest configuration {project / config}" in ignored, result.stdout[:2000]
    for conftest in {p for p in brought if p.endswith("conftest.py")}:
        assert f"conftest {project / conftest}" in ignored, result.stdout[:2000]
    for config in brought & CONFIG_FILES:  # the plugin its addopts loaded (before any solbench code could act)
        plugin = re.search(r"-p (\w+)", (project / config).read_text()).group(1)
        assert f"plugin {plugin} ({project / plugin}.py)" in ignored, result.stdout[:2000]


def test_solbench_gate_fails_a_wrong_kernel_whatever_the_trees_bring(hostile_projects, tmp_path):
    """One gate over every group's solutions, started inside the tree that ships `sitecustomize.py`, `.pth`
    and a conftest (the gate starts no pytest; its evaluation runs in an isolated process outside the tree)."""
    home = next(p for p, names in zip(hostile_projects, GROUPS, strict=True)
                if "pth_and_sitecustomize_in_the_tree" in names)
    for index, project in enumerate(hostile_projects):  # one name per solution across the groups
        for name in ("good", "wrong"):
            (project / "solutions" / f"{name}.py").rename(project / "solutions" / f"{name}{index}.py")
    (home / "solutions" / "conftest.py").write_text(FLIP_REPORTS + HARD_EXIT)
    (home / ".solbench").mkdir(exist_ok=True)
    (home / ".solbench" / "verdict.json").write_text('{"verdict": "pass"}')  # planted: must not survive
    result = run(home, "-m", "solbench", "gate", *[str(p / "solutions") for p in hostile_projects],
                 "--problems", "problem_defs", "--device", "cpu", "--quick", "--max-workloads", "1")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = json.loads((home / ".solbench" / "verdict.json").read_text())
    assert verdict["verdict"] == "fail" and verdict["counts"] == {"PASSED": len(GROUPS),
                                                                  "INCORRECT_NUMERICAL": len(GROUPS)}, verdict
    assert (home / ".solbench" / ".gitignore").read_text().splitlines()[-1] == "*"
    last = result.stderr.strip().splitlines()
    assert any(line.startswith("solbench gate: FAIL") and "verdict in .solbench/verdict.json" in line
               for line in last), result.stderr[-2000:]


def test_pytest_gates_an_honest_pr_that_ships_pytest_configuration(tmp_path):
    """An ordinary kernel PR with its own pytest settings and a harmless conftest passes, and the session
    says which of its files it ignored."""
    write_problem(tmp_path / "problem_defs")
    (tmp_path / "solutions").mkdir()
    solution(tmp_path, "good.py")
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "conftest.py").write_text("import os\n")
    result = run(tmp_path, "-m", "pytest", "--solbench", "solutions", "--solbench-device", "cpu", "--solbench-quick",
                 "--solbench-max-workloads", "1", "-q")
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    assert (f"ignored from the tree under test: pytest configuration {tmp_path / 'pyproject.toml'}; "
            f"conftest {tmp_path / 'conftest.py'}") in result.stdout, result.stdout[:2000]


def test_solbench_gate_passes_a_correct_kernel_and_refuses_old_traces(project):
    solution(project, "good.py")
    result = run(project, "-m", "solbench", "gate", "solutions", "--problems", "problem_defs", "--device", "cpu",
                 "--quick", "--max-workloads", "1", "--verdict", "verdict.json", "--traces", "t.jsonl")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads((project / "verdict.json").read_text())["verdict"] == "pass"
    assert result.stderr.strip().splitlines()[-1].endswith("verdict in verdict.json, traces in t.jsonl")
    again = run(project, "-m", "solbench", "gate", "solutions", "--problems", "problem_defs", "--traces", "t.jsonl",
                "--verdict", "verdict.json")
    assert again.returncode == 2 and "exists" in again.stderr and not (project / "verdict.json").exists()


def test_solbench_gate_refuses_to_run_with_a_module_of_the_tree(project):
    """`python -m solbench gate` started in a tree that shadows a module the gate imports: refused, not run."""
    solution(project, "good.py")
    (project / "gettext.py").write_text("def gettext(message):\n    return message\n\n\n"  # argparse's import
                                        "def ngettext(one, many, n):\n    return one if n == 1 else many\n")
    result = run(project, "-m", "solbench", "gate", "solutions", "--problems", "problem_defs", "--device", "cpu")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "imported from the tree under test: gettext" in result.stderr, result.stderr[-2000:]


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
