"""A cgroup v2 per worker, where this machine lets us make one: everything the worker starts is in it,
whatever its parentage (`clone(CLONE_PARENT)`, a double fork, `setsid`), and `cgroup.kill` ends all of
it at once when the worker ends. The worker moves itself in before anything else (worker/sandbox.py);
Landlock then keeps it from writing anywhere under /sys/fs/cgroup, so it cannot move out.

Probed at run time: no cgroup2 mount, a read-only one, or no right to make a child group (an ordinary
user without delegation) means no cgroup, said so in the trace's environment (`sandbox.cgroup`); the
worker's other containment (a PID namespace, or seccomp without CLONE_PARENT and clone3) holds instead.
"""

from __future__ import annotations

import atexit
import itertools
import os
import time
from pathlib import Path

_counter = itertools.count()
_made: set[str] = set()  # groups this process made and has not removed yet: removed at its exit


@atexit.register
def _remove_left() -> None:
    for path in list(_made):
        kill(path, wait_s=1)


def _cgroup2_root() -> Path | None:
    """Where this process's own cgroup v2 group is in the file system."""
    mount = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if " - cgroup2 " in line:
                    mount = fields[4]
                    break
        own = next((line.strip()[3:] for line in open("/proc/self/cgroup") if line.startswith("0::")), None)
    except OSError:
        return None
    if mount is None or own is None:
        return None
    return Path(mount) / own.lstrip("/")


def make(role: str) -> tuple[str | None, str]:
    """A fresh, empty group for one worker: (its path, "") or (None, why there is none)."""
    root = _cgroup2_root()
    if root is None:
        return None, "no cgroup v2 mounted"
    _sweep(root)
    path = root / f"solbench-{os.getpid()}-{next(_counter)}-{role}"
    try:
        path.mkdir()
    except OSError as exc:
        return None, f"cannot make a group under {root}: {exc.strerror or exc}"
    if not (path / "cgroup.kill").exists():  # Linux < 5.14
        path.rmdir()
        return None, "no cgroup.kill (Linux 5.14 or later needed)"
    _made.add(str(path))
    return str(path), ""


def _sweep(root: Path) -> None:
    """Remove the empty groups of orchestrators that are gone (killed before they could remove them)."""
    try:
        stale = [p for p in root.glob("solbench-*-*") if not Path(f"/proc/{p.name.split('-')[1]}").exists()]
    except OSError:
        return
    for group in stale:
        try:
            group.rmdir()  # refused while a process is still in it
        except OSError:
            pass


def join(path: str) -> None:
    """Move the calling process into the group (before it starts anything)."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write("0")


def members(path: str) -> list[int]:
    try:
        return [int(p) for p in Path(path, "cgroup.procs").read_text().split()]
    except OSError:
        return []


def kill(path: str | None, wait_s: float = 10) -> list[int]:
    """SIGKILL everything in the group, wait until it is empty, remove it. Returns who was still in it."""
    if not path or not os.path.isdir(path):
        return []
    inside = members(path)
    try:
        Path(path, "cgroup.kill").write_text("1")
    except OSError:
        pass
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:  # a process that exited may hold the group until it is reaped
        try:
            os.rmdir(path)
            _made.discard(path)
            break
        except FileNotFoundError:
            break
        except OSError:  # EBUSY while populated: cgroup.kill's processes are still going
            time.sleep(0.01)
    return inside
