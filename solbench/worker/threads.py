"""What a solution runs beside its calls: threads and child processes, watched around timed calls.

A solution may keep threads (a pool), but none of them may keep computing once a call has returned,
and none may finish later than a call it was busy in: that would be work hidden from the timer. Child
processes may not outlive the calls that started them.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from solbench.worker.state import Failure, WorkerState

_perf_counter = time.perf_counter
_thread_enumerate = threading.enumerate
_main_thread = threading.main_thread
_clock_gettime = time.clock_gettime
_thread_cpu_clock = getattr(time, "pthread_getcpuclockid", None)


def thread_cpu_s(thread: threading.Thread) -> float | None:
    """CPU seconds a thread has used so far (None when unknown or it has ended)."""
    if _thread_cpu_clock is None or thread.ident is None:
        return None
    try:
        return _clock_gettime(_thread_cpu_clock(thread.ident))
    except (OSError, ValueError, OverflowError):
        return None


class ThreadWatch:
    """Threads of the solution around timed calls: they may persist (a pool), they may not work
    while the call is over, and one that was alive after a call may not finish later (it was busy)."""

    def __init__(self, state: WorkerState):
        self.state = state
        self.seen: dict[int, threading.Thread] = {}
        self.marks: dict[int, float] = {}
        self.window_start = 0.0
        self.tools_seen = state.guard.tools_started if state.guard is not None else 0

    def extra(self) -> list[threading.Thread]:
        # The harness runs on the main thread; a worker that never served a trial (the reference
        # worker judges instead) has no baseline yet, and its main thread is not the solution's.
        base = (self.state.baseline_threads or set()) | {_main_thread().ident}
        return [t for t in _thread_enumerate() if t.ident not in base and t.is_alive()]

    def call_returned(self) -> None:
        """Right after a call: remember the solution's threads and their CPU clocks; a toolchain program
        the call started (a JIT compile) must have exited with it, or it was work hidden from the timer."""
        if self.state.guard is not None and self.state.guard.tools_started != self.tools_seen:
            self.tools_seen = self.state.guard.tools_started
            running = child_processes()
            if running:
                raise Failure("REWARD_HACK", f"processes {running} started while being timed were still running "
                                             f"after the call had returned (work hidden from the timer)")
        self.marks = {}
        for t in self.extra():
            self.seen[t.ident] = t
            used = thread_cpu_s(t)
            if used is not None:
                self.marks[t.ident] = used
        self.window_start = _perf_counter()

    def check_idle(self) -> None:
        """Before the next call: no solution thread may have kept computing meanwhile."""
        window = _perf_counter() - self.window_start
        for ident, before in self.marks.items():
            thread = self.seen[ident]
            after = thread_cpu_s(thread)
            if after is not None and after - before > max(50e-6, 0.5 * window):
                raise Failure("REWARD_HACK", f"thread {thread.name!r} kept computing for {(after - before) * 1e6:.0f} us "
                                             f"after the call had returned (work hidden from the timer)")
        self.marks = {}

    def check_end(self) -> None:
        finished = [t.name for t in self.seen.values() if not t.is_alive()]
        if finished:
            raise Failure("REWARD_HACK", f"threads {finished} were still running after a call returned and "
                                         f"finished later (work hidden from the timer)")
        if self.state.baseline_threads is not None:  # idle persistent helpers (a pool) are part of the solution
            self.state.baseline_threads |= set(self.seen)


def background_activity(state: WorkerState) -> str | None:
    """Python threads or child processes the solution left running after its calls returned."""
    if state.baseline_threads is not None:
        extra = [t.name for t in _thread_enumerate() if t.ident not in state.baseline_threads and t.is_alive()]
        if extra:
            return f"the solution left background threads running: {extra}"
    children = child_processes()
    if children:
        return f"the solution left child processes running: {children}"
    return None


def child_processes() -> list[int]:
    """Live (not zombie) children of this process (Linux /proc; empty elsewhere)."""
    pids: list[int] = []
    task_dir = Path("/proc/self/task")
    if not task_dir.is_dir():
        return pids
    for task in task_dir.iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive
