"""A child that must import this checkout keeps the packages that reach Python only through PYTHONPATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[1]


def test_the_checkout_comes_first_and_the_callers_path_stays(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "only_on_the_path.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    code = "import only_on_the_path, solbench, sys; print(only_on_the_path.VALUE, solbench.__file__)"
    done = subprocess.run([sys.executable, "-c", code], env=repo_env(REPO, EXTRA_FLAG="1"), capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    value, where = done.stdout.split()
    assert value == "7" and Path(where).resolve().is_relative_to(REPO)
    assert repo_env(REPO, EXTRA_FLAG="1")["EXTRA_FLAG"] == "1"
