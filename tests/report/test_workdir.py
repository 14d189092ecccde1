"""Outputs with default options land under `.solbench/`, which ignores itself: a user's `git status` stays clean,
and every path a command names exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from solbench.cli import main
from solbench.report.traces import TraceFile, default_trace_path
from tests.report.conftest import sample_traces, write_traces

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git_status(repo: Path) -> str:
    return subprocess.run(["git", "status", "--short", "--untracked-files=all"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "user-repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    monkeypatch.chdir(root)
    monkeypatch.delenv("SOLBENCH_RUNS_DIR", raising=False)
    return root


def test_report_and_leaderboard_with_default_options_leave_git_status_clean(repo, tmp_path, capsys):
    traces = write_traces(tmp_path / "elsewhere" / "t.jsonl", sample_traces())
    assert main(["report", str(traces)]) == 0
    said = capsys.readouterr().err
    written = Path(re.search(r"wrote (\S+)", said).group(1))
    assert written.is_file() and written.resolve().parent == (repo / ".solbench").resolve()
    assert main(["leaderboard", str(traces)]) == 0  # stdout only
    assert git_status(repo) == ""


def test_a_run_s_default_trace_file_is_ignored_by_git(repo):
    path = default_trace_path()
    TraceFile(path).append(sample_traces()[0])  # the file and its signing key, as a run writes them
    assert path.is_file() and ".solbench" in path.parts
    assert git_status(repo) == ""
    assert (repo / ".solbench" / ".gitignore").read_text().splitlines()[-1] == "*"
