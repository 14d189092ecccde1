"""A process's children from /proc, one home for the orchestrator's tree kill and the worker's own watch:
real processes, a zombie left unreaped, a grandchild behind a shell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from solbench.orchestrator.process_tree import children, descendants, kill_tree, running
from solbench.worker.threads import child_processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def wait_for(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_children_of_this_process_and_a_zombie_left_out():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in children("self") and child.pid in children(os.getpid())
        assert running(child.pid) and child.pid in child_processes()
        os.kill(child.pid, signal.SIGKILL)  # not reaped yet: a zombie, still listed as a child
        assert wait_for(lambda: not running(child.pid))
        assert child.pid in children("self") and child.pid not in child_processes()
    finally:
        child.kill()
        child.wait()


def test_descendants_reach_a_grandchild_and_kill_tree_ends_them():
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        assert wait_for(lambda: bool(descendants(shell.pid)))
        (grandchild,) = descendants(shell.pid)
        assert {shell.pid, grandchild} <= set(descendants(os.getpid()))
        kill_tree(shell.pid)
        assert wait_for(lambda: not running(grandchild))
    finally:
        shell.kill()
        shell.wait()
    assert children(2**22 + 12345) == [] and not running(2**22 + 12345)  # no such process
