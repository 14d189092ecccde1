"""A process tree from /proc: a worker's, ended from the outside (what kills a GPU worker's descendants where
there is neither a PID namespace nor a cgroup of its own, orchestrator/cgroup.py, to do it), and the
children a worker watches for itself (worker/threads.py). Linux only: elsewhere a process has no children here."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie's parent, stopped, would keep it listed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except PermissionError:  # a GPU worker's read rules hide its children's /proc entries (worker/reads.py)
        return _alive_child(pid)
    except (OSError, IndexError):
        return False


def _alive_child(pid: int) -> bool:
    """Whether a child of this process runs, asked of the kernel without /proc and without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:  # not a child: alive while it can be named
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def children(pid: int | str) -> list[int]:
    """The child processes of `pid` ("self": this process), started from any of its threads."""
    try:  # a process may end between two reads: it then has no children to list
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def kill_tree(pid: int, rounds: int = 100) -> None:
    """Kill every descendant of `pid`, then `pid`. The worker is stopped first, so it starts nothing more,
    and it is a subreaper (worker/sandbox.py): orphans of the killed are re-parented to it and seen by the
    next round, until no descendant runs. Without a cgroup or PID namespace, this is what ends them."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(rounds):
        running_now = [child for child in descendants(pid) if running(child)]
        if not running_now:
            break
        for child in running_now:
            try:
                os.kill(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def descendants(pid: int) -> list[int]:
    """Child processes of `pid`, recursively."""
    found, stack = [], [pid]
    while stack:
        found_now = children(stack.pop())
        found += found_now
        stack += found_now
    return found
