"""What a solution runs beside its calls: threads and child processes, watched around timed calls.

A solution may keep threads (a pool), but none of them may keep computing once a call has returned,
and none may finish later than a call it was busy in: that would be work hidden from the timer. Child
processes may not outlive the calls that started them.
"""

from __future__ import annotations

import threading
import time

from solbench.orchestrator.process_tree import children, running
from solbench.worker.state import Failure, WorkerState

_perf_counter = time.perf_counter
_clock_gettime = time.clock_gettime
_thread_cpu_clock = getattr(time, "pthread_getcpuclockid", None)
_PROCESS_CPU = getattr(time, "CLOCK_PROCESS_CPUTIME_ID", None)
_THREAD_CPU = getattr(time, "CLOCK_THREAD_CPUTIME_ID", None)
# Python's own table of running threads, keyed by the ident each thread got from the OS when it started.
# A thread object's `ident`/`is_alive` are the solution's to override; this table's keys are not.
_active = threading._active
_harness_thread = threading.main_thread()
OTHER_THREADS_FLOOR_S = 1e-3  # CPU seconds other threads may use between two calls (runtime threads)
# How long the end of a block waits for threads that timed calls started and left running: a released
# thread is runnable and ends as soon as the OS runs it, however busy the machine (the wait gives up the GIL).
SETTLE_WAIT_S = 5.0
_sleep = time.sleep


def thread_cpu_s(ident: int) -> float | None:
    """CPU seconds the thread with this OS ident has used so far (None when unknown or it has ended)."""
    if _thread_cpu_clock is None:
        return None
    try:
        return _clock_gettime(_thread_cpu_clock(ident))
    except (OSError, ValueError, OverflowError):
        return None


def live_threads() -> list[tuple[int, threading.Thread]]:
    """(OS ident, thread) of every running Python thread but the harness's."""
    return [(ident, t) for ident, t in list(_active.items()) if t is not _harness_thread]


def baseline_threads() -> dict[int, threading.Thread]:
    """The threads alive now, by object (held, so no later object reuses an id): the solution's persistent
    helpers once it has loaded."""
    return {id(t): t for _, t in live_threads()}


def other_threads_cpu_s() -> float | None:
    """CPU seconds used by every thread of this process but the calling one (kernel clocks: no thread can
    hide from them, whatever it did to Python's thread table)."""
    if _PROCESS_CPU is None or _THREAD_CPU is None:
        return None
    return _clock_gettime(_PROCESS_CPU) - _clock_gettime(_THREAD_CPU)


class ThreadWatch:
    """Threads of the solution around timed calls: they may persist (a pool), they may not work
    while the call is over, and one that was alive after a call may not finish later (it was busy).
    Threads are told apart by object, never by ident (the OS reuses idents of finished threads)."""

    def __init__(self, state: WorkerState):
        self.state = state
        self.seen: dict[int, threading.Thread] = {}  # id(thread) -> thread
        self.marks: dict[int, tuple[int, float]] = {}  # id(thread) -> (OS ident, CPU seconds at the call's return)
        self.window_start = 0.0
        self.others_mark: float | None = None
        self.tools_seen = state.guard.tools_started if state.guard is not None else 0
        self.probe = None  # the escaped-work probe, when its CUPTI thread may be working
        self.before = {id(t) for _, t in live_threads()}  # alive when the block began (a pool from the trials)
        self.started: dict[int, threading.Thread] = {}  # started by a timed call and alive after it returned

    def extra(self) -> list[tuple[int, threading.Thread]]:
        # A worker that never served a trial (the reference worker judges instead) has no baseline yet.
        base = self.state.baseline_threads or {}
        return [(ident, t) for ident, t in live_threads() if id(t) not in base]

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
        for ident, t in self.extra():
            if id(t) not in self.before and id(t) not in self.seen:
                self.started[id(t)] = t
            self.seen[id(t)] = t
            used = thread_cpu_s(ident)
            if used is not None:
                self.marks[id(t)] = (ident, used)
        self.others_mark = other_threads_cpu_s() if self.state.is_cuda else None
        self.window_start = _perf_counter()

    def check_idle(self) -> None:
        """Before the next call: no solution thread may have kept computing meanwhile."""
        window = _perf_counter() - self.window_start
        for key, (ident, before) in self.marks.items():
            thread = self.seen[key]
            after = thread_cpu_s(ident) if key in {id(t) for _, t in live_threads()} else None
            if after is not None and after - before > max(50e-6, 0.5 * window):
                raise Failure("REWARD_HACK", f"thread {thread.name!r} kept computing for {(after - before) * 1e6:.0f} us "
                                             f"after the call had returned (work hidden from the timer)")
        probing = self.probe is not None and self.probe.active
        if self.others_mark is not None and not probing:
            used = other_threads_cpu_s() - self.others_mark
            if used > max(OTHER_THREADS_FLOOR_S, 0.5 * window):
                raise Failure("REWARD_HACK", f"threads other than the harness's used {used * 1e3:.1f} ms of CPU in the "
                                             f"{window * 1e3:.1f} ms after the call had returned (work hidden from "
                                             f"the timer)")
        self.marks, self.others_mark = {}, None

    def settle(self, wait_s: float = SETTLE_WAIT_S) -> list[str]:
        """Threads that timed calls started, left running, and that end now that the block is over.

        Whether such a thread ended before the block's last check depends on when the OS ran it (a
        loaded machine may not have, issue 20): here the harness waits, giving up the GIL, until one
        ends or `wait_s` passes. A pool grown by a timed call stays alive and costs the wait once (its
        threads then belong to the solution's baseline); a thread released by a later call ends."""
        deadline = _perf_counter() + wait_s
        while True:
            running = {id(t) for _, t in live_threads()}
            ended = [t.name for key, t in self.started.items() if key not in running]
            if ended or _perf_counter() >= deadline:
                return ended
            _sleep(0.002)

    def check_end(self) -> None:
        running = {id(t) for _, t in live_threads()}
        finished = [t.name for key, t in self.seen.items() if key not in running]
        if not finished and self.started:
            finished = self.settle()
        if finished:
            raise Failure("REWARD_HACK", f"threads {finished} were still running after a call returned and "
                                         f"finished later (work hidden from the timer)")
        if self.state.baseline_threads is not None:  # idle persistent helpers (a pool) are part of the solution
            self.state.baseline_threads.update(self.seen)


def background_activity(state: WorkerState) -> str | None:
    """Python threads or child processes the solution left running after its calls returned."""
    if state.baseline_threads is not None:
        extra = [t.name for _, t in live_threads() if id(t) not in state.baseline_threads]
        if extra:
            return f"the solution left background threads running: {extra}"
    children = child_processes()
    if children:
        return f"the solution left child processes running: {children}"
    return None


def child_processes() -> list[int]:
    """Live (not zombie) children of this process."""
    return [pid for pid in children("self") if running(pid)]
