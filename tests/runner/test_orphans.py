"""Every process a run starts dies with its orchestrator (issue 19, item 4; issue 20, class 3): Ctrl-C,
`kill`, a terminal hang-up and SIGKILL of the orchestrator leave no worker, and no daemon that the
solution double-forked into its own session, alive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.child_env import repo_env
from tests.runner.conftest import write_problem, write_solution
from tests.signals import default_sigint

REPO = Path(__file__).resolve().parents[2]
DAEMON_ARG = "987.25"  # `sleep 987.25`: how the test recognises the solution's daemon in /proc

HELD = f'''
import os
import time

# A daemon that escapes the worker's process group: fork, setsid, fork again, the parent leaves.
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{DAEMON_ARG}"])
    os._exit(0)
os.waitpid(child, 0)
time.sleep(900)  # held at import: the worker never replies to its load


def run(x, y):
    return x * 2.0 + y
'''


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def descendants(pid: int) -> set[int]:
    found, stack = set(), [pid]
    while stack:
        for child in children(stack.pop()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=lambda s: signal.Signals(s).name)
def test_no_process_survives_its_orchestrator(tmp_path, sig):
    problem = write_problem(tmp_path / "p")
    solution = write_solution(tmp_path, HELD)
    env = repo_env(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "solbench", "run", str(problem), "--solution", str(solution),
                             "-o", str(tmp_path / "t.jsonl"), "--device", "cpu", "--compile-timeout", "900"],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=default_sigint)
    try:
        daemon = None
        deadline = time.monotonic() + 240  # worker start-up on a loaded 2-core machine: generous, not a timing assert
        while daemon is None and time.monotonic() < deadline and proc.poll() is None:
            started = descendants(proc.pid)
            daemon = next((p for p in started if DAEMON_ARG in cmdline(p)), None)
            time.sleep(0.2)
        assert daemon is not None, "the held solution's daemon never started"
        started = descendants(proc.pid)
        assert daemon in started, "the daemon was not re-parented below the run (subreaper / PID namespace)"
        os.kill(proc.pid, sig)
        proc.wait(timeout=120)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(alive(p) for p in started):
            time.sleep(0.2)
        survivors = {p: cmdline(p) for p in started if alive(p)}
        assert not survivors, f"processes outlived the orchestrator ({signal.Signals(sig).name}): {survivors}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in descendants(os.getpid()):
            if DAEMON_ARG in cmdline(pid):
                os.kill(pid, signal.SIGKILL)
