"""The cores a CPU run's timed workers share: both sides on the same ones, claimed so that concurrent runs
on the machine take different ones.

Why: on a 2-core VM the two vCPUs do not run a call at the same speed (a neighbour on the host shares one
of them), and an unpinned worker wakes where it last ran, so the reference and the solution each kept a
core of their own and a kernel timed against itself read 0.66-1.50x on short calls, the same way in every
round of a workload (docs/timing.md, "CPU timings"). On one core both sides see the same core.

A claim is a non-blocking `flock` on one file per core in the machine's temporary folder, held by this
orchestrator process until it exits (the kernel drops it with the process, however it ends). Where every
core is taken, or the process may run on fewer cores than the workers' threads, nothing is pinned.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from pathlib import Path

CORES_ENV = "SOLBENCH_CPU_CORES"  # what a worker pins itself to (worker.state)
LOCK_FOLDER = "solbench-cpu-cores"

_lock = threading.Lock()
_held: dict[int, int] = {}  # core -> the open file holding its claim


def claim(threads: int = 1) -> list[int] | None:
    """`threads` cores of this process's allowed set for its CPU workers, the highest free ones (the
    claims of this process are reused: one orchestrator, one set), or None where none are free."""
    with _lock:
        if len(_held) >= threads:
            return sorted(_held)[:threads]
        try:
            allowed = sorted(os.sched_getaffinity(0), reverse=True)
        except (AttributeError, OSError):  # not Linux
            return None
        if len(allowed) < threads:
            return None
        for core in allowed:
            if core not in _held and _take(core):
                if len(_held) == threads:
                    return sorted(_held)
        return None


def env_value(cores: list[int] | None) -> str:
    return ",".join(map(str, cores)) if cores else ""


def parse(value: str | None) -> set[int]:
    """The cores named by `CORES_ENV` (empty: not pinned)."""
    try:
        return {int(v) for v in (value or "").split(",") if v.strip()}
    except ValueError:
        return set()


def _take(core: int) -> bool:
    folder = Path(tempfile.gettempdir()) / LOCK_FOLDER
    try:
        folder.mkdir(mode=0o1777, exist_ok=True)
        fd = os.open(folder / f"{core}.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o444)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[core] = fd
    return True
