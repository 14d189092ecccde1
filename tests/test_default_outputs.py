"""A user's clone stays clean: after `run`, `gate`, `report`, `leaderboard` and `extract` with default options,
`git status --short` is empty and every path the commands print exists (issue 48).

The clone is a git repository holding the checkout's layout for what the commands read (one core problem and
its torch solution, the extracted problems of the smallest shipped model with their references), committed;
the commands run in it as a user types them, on the CPU, with `--max-workloads 1`. Extraction is not
validated (`--no-validate`: the comparison on CPU changes nothing that is written).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[1]
PROBLEM = "problem_defs/core/layernorm_fp32_h1024"
SOLUTION = "solutions/layernorm_fp32_h1024/torch_layernorm.py"
MODEL = "google/vit-base-patch16-224"  # the shipped model with the fewest problems
# A printed path: a token with a `/` and a letter, or a file name with an output's suffix, standing alone
PRINTED_PATH = re.compile(r"(?:(?<=\s)|(?<=\()|^)((?=[^\s]*[A-Za-z])[\w.-]*(?:/[\w.-]+)+|[\w.-]+\.(?:jsonl|json|html|csv))"
                          r"(?=[\s;,)]|$)", re.M)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, capture_output=True, text=True, check=True).stdout


def model_problems(model_id: str) -> list[str]:
    return sorted(d.parent.name for d in (REPO / "problem_defs" / "hf").glob("*/definition.json")
                  if model_id in {m["hf_id"] for m in json.loads(d.read_text())["solbench"]["models"]})


@pytest.fixture
def clone(tmp_path) -> Path:
    root = tmp_path / "clone"
    shutil.copytree(REPO / PROBLEM, root / PROBLEM)
    (root / SOLUTION).parent.mkdir(parents=True)
    shutil.copy(REPO / SOLUTION, root / SOLUTION)
    names = model_problems(MODEL)
    assert names, f"no shipped problem records {MODEL}"
    for name in names:
        shutil.copytree(REPO / "problem_defs" / "hf" / name, root / "problem_defs" / "hf" / name)
        for reference in (REPO / "reference_impls" / "hf").glob(f"{name}*.py"):
            (root / "reference_impls" / "hf").mkdir(parents=True, exist_ok=True)
            shutil.copy(reference, root / "reference_impls" / "hf" / reference.name)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=solbench", "-c", "user.email=solbench@localhost", "commit", "-q", "-m", "clone")
    assert git(root, "status", "--short", "--untracked-files=all") == ""
    return root


def solbench(clone: Path, *args: str) -> subprocess.CompletedProcess:
    env = repo_env(REPO, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    env.pop("SOLBENCH_RUNS_DIR", None)
    return subprocess.run([sys.executable, "-m", "solbench", *args], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=900)


def test_default_outputs_leave_a_clone_clean_and_name_files_that_exist(clone):
    said = {}
    run = solbench(clone, "run", PROBLEM, "--device", "cpu", "--max-workloads", "1")
    assert run.returncode == 0, run.stderr[-3000:]
    traces = re.search(r"traces in (\S+)$", run.stderr.strip()).group(1)
    assert Path(traces).parts[:2] == (".solbench", "runs"), traces
    said["run"] = run
    said["gate"] = solbench(clone, "gate", SOLUTION, "--problems", "problem_defs", "--device", "cpu",
                            "--max-workloads", "1", "--quick")
    said["report"] = solbench(clone, "report", traces)
    said["leaderboard"] = solbench(clone, "leaderboard", traces)
    said["extract"] = solbench(clone, "extract", "--model", MODEL, "--no-validate")
    for command, result in said.items():
        assert result.returncode == 0, f"{command}: {result.stderr[-3000:]}"
    count = len(model_problems(MODEL))
    assert said["extract"].stderr.strip().splitlines()[-1].startswith(
        f"{count} problems: 0 written, {count} unchanged in problem_defs/hf and reference_impls/hf")
    assert said["gate"].stderr.strip().splitlines()[-1].endswith(
        "verdict in .solbench/verdict.json, traces in .solbench/gate-traces.jsonl")
    assert git(clone, "status", "--short", "--untracked-files=all") == ""
    printed = {command: PRINTED_PATH.findall(result.stdout + "\n" + result.stderr) for command, result in said.items()}
    assert all(printed[c] for c in ("run", "gate", "report", "extract")), printed  # each names where it wrote
    missing = {c: [p for p in paths if not (clone / p).exists()] for c, paths in printed.items()}
    assert not any(missing.values()), f"printed paths that do not exist: {missing}"
