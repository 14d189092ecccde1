"""Helper processes of the orchestrator die with it, whichever way it ends (issue 19, item 4).

Workers take care of themselves (worker/sandbox.py: PR_SET_PDEATHSIG, a PID namespace). The analysis
pool's processes are started by whichever thread submits first, and the kernel's parent-death signal
follows that thread, not the process; so they watch their parent process instead. This module is
imported by those processes before anything heavy: keep it light. `at_once` ends workers together.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

PARENT_POLL_S = 0.5


def _watch(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:  # re-parented: the orchestrator is gone
            os._exit(0)
        time.sleep(PARENT_POLL_S)


def pool_process_start(parent_pid: int) -> None:
    """A pool process's initializer: Ctrl-C is the orchestrator's to handle (a pool process that took
    it would print its own traceback), the process ends when the orchestrator has, and quickly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != parent_pid:
        os._exit(0)
    threading.Thread(target=_watch, args=(parent_pid,), name="solbench-parent-watch", daemon=True).start()


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while processes are started inside: they inherit the mask, so a Ctrl-C
    during their start-up, before `pool_process_start` ignores it, prints no traceback of theirs. This
    process still gets it (another thread takes delivery; Python raises it in the main thread as ever)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def at_once(steps: list[Callable[[], None]]) -> None:
    """Run `steps` together, each but the first in a thread of its own, and wait for all of them; then
    re-raise the first exception any raised. Stopping workers this way pays the seconds a process takes
    to exit (a CUDA context torn down) once, not once per worker."""
    errors: list[BaseException] = []

    def run(step: Callable[[], None]) -> None:
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, once every step is done
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(step,), name="solbench-stop", daemon=True) for step in steps[1:]]
    for thread in threads:
        thread.start()
    if steps:
        run(steps[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
