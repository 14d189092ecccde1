"""Device sessions held open across runs, for a program that asks for many verdicts (`api.Evaluator`).

A run pays its workers' start-up (a Python interpreter, torch, a CUDA context: 3-6 s on a GPU) before
its first verdict, and an agent that evaluates its candidates one call at a time pays it on every
call. A pool starts them once: the reference worker (trusted; it serves the references of every
problem and run in turn), a solution process started ahead for the next solution, and the
speed-of-light analysis pool. What a verdict checks does not change: every solution still runs in a
process that has seen no other code, started before it was known and handed out once.

Every worker of a pool is started by its device's thread, which lives as long as the pool: a worker
dies with the thread that started it (its parent-death signal, `worker.sandbox.die_with_parent`,
follows that thread, not the process), so workers started by the threads of one run would die with them.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable

from solbench.orchestrator.analysis import AnalysisPool, pool_size
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.jobs import Job
from solbench.orchestrator.lifetime import at_once
from solbench.orchestrator.process import running_pid
from solbench.orchestrator.scheduler import (
    drive_sessions,
    queue_analyses,
    ready_to_evaluate,
)
from solbench.orchestrator.session import DeviceSession
from solbench.orchestrator.sink import TraceSink
from solbench.report.traces import TraceFile
from solbench.spec.errors import SpecError
from solbench.spec.trace import Trace
from solbench.timing.clock_lock import lock_device_clocks

# Settings the pool's processes and devices are made with: a run cannot change them.
FIXED_SETTINGS = ("device", "cluster", "lock_clocks")
# How long closing waits for a device's thread to finish its work (an interrupted run's loop still ending)
# before it kills that device's workers from here.
END_WAIT_S = 60.0


class Errand:
    """One piece of work for a device thread, with a thread's `is_alive`/`join` (what a run waits on)."""

    def __init__(self, work: Callable[[], None]):
        self.work = work
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # noqa: BLE001 - kept for whoever waits on it; the thread lives on
            self.error = exc
        finally:
            self.done.set()

    def is_alive(self) -> bool:
        return not self.done.is_set()

    def join(self, timeout: float | None = None) -> None:
        self.done.wait(timeout)


class DeviceThread:
    """The thread that does one device's work, in order, for as long as the pool lives."""

    def __init__(self, device: str):
        self._inbox: queue.Queue[Errand | None] = queue.Queue()
        self._ended = False
        self._thread = threading.Thread(target=self._serve, name=f"solbench-{device}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (errand := self._inbox.get()) is not None:
            errand.run()

    def submit(self, work: Callable[[], None]) -> Errand:
        errand = Errand(work)
        if self._ended:  # nothing would ever run it
            errand.error = RuntimeError("this device's thread has ended")
            errand.done.set()
        else:
            self._inbox.put(errand)
        return errand

    def end(self, timeout_s: float = END_WAIT_S) -> bool:
        """Finish what was submitted, then end; False when that took longer than `timeout_s` (the thread is
        then left to finish on its own: a daemon, its workers killed by the caller)."""
        self._ended = True
        self._inbox.put(None)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


class SessionPool:
    """One open session per device (its reference worker, its solution worker and a spare), the analysis
    pool and the clock lock, for runs one after another; `close` ends them. Runs from several threads
    take turns."""

    def __init__(self, config: RunConfig, devices: list[str]):
        if config.cluster:
            raise SpecError("workers kept between runs are local: a cluster run starts its own actors")
        self.config = config
        self.devices = list(devices)
        self._turn = threading.Lock()
        self._closed = False
        self.sessions = [DeviceSession(device, config) for device in self.devices]
        self._threads: dict[int, DeviceThread] = {}
        self.analysis: AnalysisPool | None = None
        self.clocks = contextlib.ExitStack()
        try:
            self._threads = {id(s): DeviceThread(s.device) for s in self.sessions}
            self._new_analysis_pool()
            for errand in [self._threads[id(s)].submit(s.prestart) for s in self.sessions]:
                errand.join()
                if errand.error is not None:
                    raise errand.error
            if config.lock_clocks:
                self.clocks = lock_device_clocks(self.devices)
            # torch imported here (after the workers started, so the imports overlap), the devices checked
            ready_to_evaluate([], self.devices, TraceSink(), self.sessions, self.analysis, self.clocks)
        except BaseException:
            self._end()
            raise
        for session in self.sessions:
            session.expect_more = True

    def _new_analysis_pool(self) -> None:
        """A fresh analysis pool for every session (at the start, and after a pool process died: a broken
        pool refuses all later work, where a one-off run would have made a new one)."""
        if self.analysis is not None:
            self.analysis.close()
        self.analysis = AnalysisPool(workers=pool_size(len(self.devices)))
        self.analysis.warm()  # no analysis is known yet; on a host with cores to spare its start-up goes now
        for session in self.sessions:
            session.analysis = self.analysis

    def changed_fixed_settings(self, config: RunConfig) -> list[str]:
        """The settings of `config` that differ from the pool's own and that a run cannot change."""
        return [name for name in FIXED_SETTINGS if getattr(config, name) != getattr(self.config, name)]

    def run(self, jobs: list[Job], config: RunConfig, *, trace_file: TraceFile | None = None,
            on_trace: Callable[[Job, Trace], None] | None = None, stop: threading.Event | None = None) -> list[Trace]:
        """Evaluate `jobs` on the pool's sessions with `config` (which may differ from the pool's in
        anything but `FIXED_SETTINGS`); the traces, also appended to `trace_file` and given to `on_trace` as
        each finishes. `stop`, set from another thread (a service's cancel), ends the run as Ctrl-C would:
        the workers in flight are killed, and the next run starts fresh ones."""
        changed = self.changed_fixed_settings(config)
        if changed:
            raise SpecError(f"{', '.join(changed)} cannot change between the runs of one Evaluator "
                            f"(they were fixed when it started its workers); start another one")
        with self._turn:
            if self._closed:
                raise RuntimeError("this Evaluator is closed")
            if self.analysis.broken():
                self._new_analysis_pool()
            sink = TraceSink(trace_file, on_trace)
            queue_analyses(jobs, sink, self.analysis)
            for session in self.sessions:
                session.config = config
            try:
                return drive_sessions(jobs, config, self.sessions, sink, stop=stop or threading.Event(),
                                      start_loop=self._start_loop)
            finally:
                # While the caller reads the traces: the last solution's process killed, a fresh one waiting.
                # Not waited for; the next run's errands queue behind these on the same threads.
                for session in self.sessions:
                    self._threads[id(session)].submit(session.ready_for_next_solution)

    def _start_loop(self, session: DeviceSession, loop: Callable[[DeviceSession], None]) -> Errand:
        return self._threads[id(session)].submit(lambda: loop(session))

    def worker_pids(self) -> dict[str, dict[str, int | None]]:
        """Per device, the process ids of its reference worker, solution worker and spare (None: none running);
        for callers that want to see what the pool holds."""
        with self._turn:
            if self._closed:
                raise RuntimeError("this Evaluator is closed")
            for session in self.sessions:  # what runs between two runs has run
                self._threads[id(session)].submit(lambda: None).join()
            return {s.device: {"reference": running_pid(s.reference), "solution": running_pid(s.candidate),
                               "spare": running_pid(s.spare)} for s in self.sessions}

    def close(self) -> None:
        """Stop every worker (all devices at once), the analysis pool and the clock lock; idempotent."""
        with self._turn:
            if self._closed:
                return
            self._closed = True
            self._end()

    def _end(self) -> None:
        """Each session closed by its own thread (a worker dies with the thread that started it, so it is
        stopped there, politely, before that thread ends), then the threads, the analysis pool, the clocks."""
        try:
            closing = [self._threads[id(s)].submit(s.close) for s in self.sessions if id(s) in self._threads]
            for errand in closing:
                errand.join(END_WAIT_S)
            ended = [thread.end() for thread in self._threads.values()]
            if not all(ended) or len(closing) < len(self.sessions):  # a thread still busy: kill its workers here
                at_once([session.close for session in self.sessions])
        finally:
            if self.analysis is not None:
                self.analysis.close()
            self.clocks.close()
