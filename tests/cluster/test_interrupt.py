"""Ctrl-C on a driver that started its own local Ray cluster: finished traces kept, the next run resumes."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.cluster.test_cluster import SLOW, cli, uuids
from tests.runner.conftest import write_problem, write_solution

pytest.importorskip("ray")


def test_ctrl_c_keeps_finished_traces_and_the_rerun_resumes(tmp_path):
    problem = write_problem(tmp_path / "p", sizes=(64, 80, 96, 112, 128, 144))
    solution = write_solution(tmp_path, SLOW)
    traces = tmp_path / "traces.jsonl"
    args = ["run", str(problem), "--solution", str(solution), "-o", str(traces), "--device", "cpu",
            "--cluster", "auto", "--cluster-actors", "1", "--trials", "1", "--iters", "2", "--warmup", "1",
            "--no-adaptive", "--no-reference-timing"]
    proc = cli(args)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if traces.exists() and len(uuids(traces)) >= 2:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole process group
    output = proc.communicate(timeout=300)[0].decode()
    before = uuids(traces)
    assert proc.returncode == 130, output
    assert "Traceback" not in output and "interrupted" in output
    assert 2 <= len(before) < 6 and len(before) == len(set(before))
    rerun = cli(args)
    output = rerun.communicate(timeout=600)[0].decode()
    assert rerun.returncode == 0, output
    after = uuids(traces)
    assert len(after) == len(set(after)) == 6 and after[: len(before)] == before
