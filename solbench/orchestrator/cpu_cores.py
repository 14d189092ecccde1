"""The cores a CPU run's timed workers share: both sides on the same ones, claimed so that concurrent runs
on the machine take different ones.

Why: on a 2-core VM the two vCPUs do not run a call at the same speed (a neighbour on the host shares one
of them), and an unpinned worker wakes where it last ran, so the reference and the solution each kept a
core of their own and a kernel timed against itself read 0.66-1.50x on short calls, the same way in every
round of a workload (docs/timing.md, "CPU timings"). On one core both sides see the same core.

A claim is a non-blocking `flock` on one file per core in the machine's temporary folder, one claim per pair
of workers (a run on several CPU sessions, the anti-cheat suite's three, takes a core for each), held until
the pair's session closes or this process exits (the kernel drops it with the process, however it ends).
Where every core is taken, or the process may run on fewer cores than the workers' threads, nothing is
pinned: the workers run as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CORES_ENV = "SOLBENCH_CPU_CORES"  # what a worker pins itself to (worker.state)
LOCK_FOLDER = "solbench-cpu-cores"


@dataclass
class CoreClaim:
    """Cores held for one pair of workers, until `release`."""

    cores: list[int]
    fds: list[int] = field(default_factory=list)

    def release(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def claim(threads: int = 1) -> CoreClaim | None:
    """`threads` free cores of this process's allowed set, the highest first, or None where there are not
    that many free."""
    try:
        allowed = sorted(os.sched_getaffinity(0), reverse=True)
    except (AttributeError, OSError):  # not Linux
        return None
    held = CoreClaim([])
    for core in allowed if len(allowed) >= threads else []:
        fd = _take(core)
        if fd is not None:
            held.cores.append(core)
            held.fds.append(fd)
            if len(held.cores) == threads:
                held.cores.sort()
                return held
    held.release()
    return None


def env_value(claimed: CoreClaim | None) -> str:
    return ",".join(map(str, claimed.cores)) if claimed else ""


def parse(value: str | None) -> set[int]:
    """The cores named by `CORES_ENV` (empty: not pinned)."""
    try:
        return {int(v) for v in (value or "").split(",") if v.strip()}
    except ValueError:
        return set()


def _take(core: int) -> int | None:
    folder = Path(tempfile.gettempdir()) / LOCK_FOLDER
    try:
        folder.mkdir(mode=0o1777, exist_ok=True)
        fd = os.open(folder / f"{core}.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o444)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd
