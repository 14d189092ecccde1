"""Ctrl-C on a driver that started its own local Ray cluster: finished traces kept, the next run resumes."""

from __future__ import annotations

import os
import signal

import pytest

from tests.cluster.test_cluster import cli, start_slow_run, uuids

pytest.importorskip("ray")


def test_ctrl_c_keeps_finished_traces_and_the_rerun_resumes(tmp_path):
    proc, args, traces = start_slow_run(tmp_path, "auto")
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
