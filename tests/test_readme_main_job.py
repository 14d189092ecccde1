"""The README's main job, as a new user runs it on a CPU-only machine: its promised counts stay true."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[1]
PROMISE = re.compile(r"Expect (\d+) workloads, (\d+) PASSED and (\d+) SKIPPED")


def test_the_main_job_gives_what_the_readme_promises(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the README's counts are for a machine without a GPU")
    promise = PROMISE.search(" ".join((REPO / "README.md").read_text().split()))
    assert promise, "the README no longer says what the main job gives"
    workloads, passed, skipped = map(int, promise.groups())
    traces = tmp_path / "traces.jsonl"
    done = subprocess.run([sys.executable, "-m", "solbench", "run", "--max-workloads", "2", "-o", str(traces)],
                          cwd=tmp_path, env=repo_env(REPO, CUDA_VISIBLE_DEVICES=""), capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = Counter(json.loads(line)["evaluation"]["status"] for line in traces.read_text().splitlines())
    assert (sum(statuses.values()), statuses["PASSED"], statuses["SKIPPED"]) == (workloads, passed, skipped), (
        f"the main job gave {dict(statuses)}; README.md says {promise.group(0)}")
    assert not (tmp_path / ".solbench").exists()  # -o given: nothing else written
