"""Spreading (problem, solution) jobs over devices: one worker pair per device, a shared queue.

Each device thread takes the next job when it finishes one (dynamic load balancing), so a slow
problem does not hold the others back. Results do not depend on which device ran a job, apart
from timing noise.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from solbench.orchestrator.config import DeviceUnavailableError, RunConfig
from solbench.orchestrator.devices import check_torch_sees
from solbench.orchestrator.jobs import Job
from solbench.orchestrator.process import WorkerProcess
from solbench.orchestrator.sink import TraceSink
from solbench.orchestrator.timeline import RunTimeline
from solbench.orchestrator.worker_pair import release_cores, worker_pair
from solbench.report.traces import TraceFile
from solbench.spec.trace import Trace
from solbench.timing.clock_lock import lock_device_clocks

if TYPE_CHECKING:
    from solbench.orchestrator.analysis import AnalysisPool
    from solbench.orchestrator.session import DeviceSession


WorkerPair = tuple[WorkerProcess, WorkerProcess]  # one device's (reference's, solution's) worker processes


def start_device_workers(devices: list[str], timeline: RunTimeline | None = None) -> list[WorkerPair]:
    """Start each device's two workers now, one pair per entry of `devices`: their start-up (Python, torch,
    CUDA) is seconds that overlap whatever the caller does next (its own torch import, building the jobs)
    instead of delaying each device's first workload. A failure kills what was started."""
    pairs: list[WorkerPair] = []
    try:
        for device in devices:
            pair = worker_pair(device)
            pairs.append(pair)
            for worker in pair:
                if timeline is not None:
                    timeline.mark("first_spawn")
                worker.start()
    except BaseException:
        kill_workers(pairs)
        raise
    return pairs


def kill_workers(pairs: list[WorkerPair]) -> None:
    """Kill started workers that no session took (a run that ended before its devices ran anything)."""
    for pair in pairs:
        for worker in pair:
            worker.kill()
        release_cores(pair)


def run_jobs(jobs: list[Job], config: RunConfig, devices: list[str], *, trace_file: TraceFile | None = None,
             on_trace: Callable[[Job, Trace], None] | None = None,
             on_job_start: Callable[[Job, str], None] | None = None,
             stop: threading.Event | None = None, launch=None, timeline: RunTimeline | None = None,
             workers: list[WorkerPair] | None = None) -> list[Trace]:
    """Evaluate every job; traces are written as they finish and also returned.

    `stop`, set from another thread (the pytest plugin's session ending), or Ctrl-C in the calling
    thread, ends the run early: no workload starts after it, the workers of workloads in flight are
    killed, and what those would have reported is dropped (a killed worker is no result); traces
    already written stay. Ctrl-C is re-raised once that is done. With `config.cluster` set the jobs go to
    the Ray actors of `cluster.run_cluster_jobs` instead, through the same trace sink (`launch`: a
    `cluster.ClusterLaunch` the caller began early, so its actors start while the jobs were being built).
    `timeline`, if given, notes the run's stages (`orchestrator.timeline`). `workers`: the devices' worker
    pairs the caller already started (`start_device_workers(devices)`, same order); this run owns them
    from here on and stops them, whatever happens.
    """
    stop = stop or threading.Event()
    timeline = timeline or RunTimeline()
    sink = TraceSink(trace_file, on_trace, timeline)
    pairs = list(workers or [])
    if config.cluster:
        kill_workers(pairs)  # never asked for with a cluster; owned here all the same
        from solbench.orchestrator.cluster import run_cluster_jobs  # inner: ray is an optional extra

        try:
            return run_cluster_jobs(jobs, config, sink, on_job_start=on_job_start, stop=stop, launch=launch)
        finally:
            timeline.mark("closed")
    # A device beyond the number of jobs would never get one: its workers are not started at all.
    sessions, analysis, clocks = open_sessions(config, devices, devices[:max(1, len(jobs))], pairs, timeline)
    ready_to_evaluate(jobs, devices, sink, sessions, analysis, clocks)
    try:
        return drive_sessions(jobs, config, sessions, sink, stop=stop, on_job_start=on_job_start)
    finally:
        analysis.close()
        clocks.close()
        timeline.mark("closed")


def drive_sessions(jobs: list[Job], config: RunConfig, sessions: list[DeviceSession], sink: TraceSink, *,
                   stop: threading.Event, on_job_start: Callable[[Job, str], None] | None = None,
                   start_loop: StartLoop | None = None) -> list[Trace]:
    """Evaluate `jobs` on open device sessions, each session's loop taking the next job from a shared
    queue; the run's traces. By default each loop runs in a thread of its own and closes its session when
    it ends. With `start_loop` (a `session_pool.SessionPool`'s device threads) the sessions outlive the run
    and always expect more work, so the next solution's process is started ahead even after the last job."""
    from solbench.orchestrator.evaluate import evaluate_problem  # inner: torch (the caller imported it)

    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    lock = threading.Lock()
    errors: list[BaseException] = []
    kept = start_loop is not None

    def device_loop(session: DeviceSession) -> None:
        device = session.device
        try:
            while not stop.is_set():
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    return
                solution = job.resolved_solution()
                digest = solution.content_hash()

                def skip(workload, _job=job, _digest=digest):
                    return stop.is_set() or sink.is_done(_job, workload, _digest)

                with pending.mutex:
                    queued = list(pending.queue)
                # A job after this one needs a fresh solution process unless both run references (one
                # process serves references in turn): then the next solution's worker starts early.
                session.expect_more = kept or (bool(queued) and (job.solution is not None
                                                                      or any(j.solution for j in queued)))
                if on_job_start:
                    on_job_start(job, device)
                for trace in evaluate_problem(session, job.problem, solution, config, job.workloads, skip=skip):
                    if stop.is_set():
                        break  # its workers may have been killed under it: not a result
                    sink.accept(job, trace)
        except BaseException as exc:  # noqa: BLE001 - surfaced after the other devices finish
            if not stop.is_set():
                errors.append(exc)
        finally:
            if not kept:
                try:
                    session.close()
                except Exception as exc:  # noqa: BLE001 - surfaced like the loop's own errors, never in a thread
                    if not stop.is_set():
                        errors.append(exc)

    interrupted = run_device_threads(sessions, device_loop, stop, lock, start_loop=start_loop)
    if interrupted is not None:
        raise interrupted
    if errors:
        raise errors[0]
    return sink.results


def queue_analyses(jobs: list[Job], sink: TraceSink, analysis: AnalysisPool) -> None:
    """Send every speed-of-light analysis the jobs need and the cache lacks to the pool, in the order the
    devices take the jobs; a resumed run skips what is done."""
    for job in jobs:  # the solution's hash once per job, not per workload
        digest = job.resolved_solution().content_hash() if sink.trace_file is not None else None
        analysis.submit_ahead((job.problem.definition, workload) for workload in job.workloads
                              if not sink.is_done(job, workload, digest))


def ready_to_evaluate(jobs: list[Job], devices: list[str], sink: TraceSink, sessions: list[DeviceSession],
                      analysis: AnalysisPool, clocks: contextlib.ExitStack) -> None:
    """Queue every analysis the cache lacks (the pool then starts while the workers do, before this
    process's own torch import), then import the evaluation (torch) and check that torch can use the
    devices chosen without it. Whatever fails closes everything it was given."""
    try:
        queue_analyses(jobs, sink, analysis)
        import solbench.orchestrator.evaluate  # noqa: F401 - inner: torch (judging), after the analyses are queued

        unusable = check_torch_sees(devices)
        if unusable:
            raise DeviceUnavailableError(unusable)
    except BaseException:
        for session in sessions:
            session.close()
        analysis.close()
        clocks.close()
        raise


def open_sessions(config: RunConfig, devices: list[str], active: list[str], pairs: list[WorkerPair],
                  timeline: RunTimeline) -> tuple[list[DeviceSession], AnalysisPool, contextlib.ExitStack]:
    """A session per device of `active`, on the given worker pairs (the rest started here, before the
    torch import that follows, so the two overlap), sharing one analysis pool; and the clock lock. Pairs
    beyond `active`, and every pair if this fails, are killed."""
    kill_workers(pairs[len(active):])
    del pairs[len(active):]
    try:
        pairs += start_device_workers(active[len(pairs):], timeline)
        from solbench.orchestrator.analysis import AnalysisPool, pool_size  # inner: not for a cluster driver
        from solbench.orchestrator.session import DeviceSession  # inner: as above

        clocks = lock_device_clocks(devices) if config.lock_clocks else contextlib.ExitStack()
    except BaseException:
        kill_workers(pairs)
        raise
    analysis = AnalysisPool(workers=pool_size(len(active)))
    sessions = [DeviceSession(device, config, pair) for device, pair in zip(active, pairs)]
    for session in sessions:
        session.analysis = analysis
    return sessions, analysis, clocks


class Running(Protocol):
    """A session's loop, running: a thread, or an errand on a thread that outlives the run."""

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...


StartLoop = Callable[["DeviceSession", Callable[["DeviceSession"], None]], Running]  # starts `loop(session)` somewhere


def run_device_threads(sessions: list[DeviceSession], device_loop: Callable[[DeviceSession], None],
                       stop: threading.Event, lock: threading.Lock, *,
                       start_loop: StartLoop | None = None) -> BaseException | None:
    """`device_loop` for every session, started by `start_loop` (default: a thread each), and waited for
    (`wait_or_stop`); the interrupt to re-raise, if there was one. A session whose loop never started
    (Ctrl-C meanwhile) is closed here, unless it outlives the run (`start_loop` given)."""
    running: list[Running] = []
    interrupted: BaseException | None = None
    try:
        for session in sessions:
            if start_loop is not None:
                running.append(start_loop(session, device_loop))
                continue
            thread = threading.Thread(target=device_loop, args=(session,), name=f"solbench-{session.device}",
                                      daemon=True)
            running.append(thread)  # listed first: Ctrl-C inside start() may come once the thread runs
            thread.start()
    except BaseException as exc:  # noqa: BLE001 - re-raised by the caller once the others are stopped
        interrupted = exc
        stop.set()
        if start_loop is None:
            for index, session in enumerate(sessions):
                if index >= len(running) or running[index].ident is None:
                    session.close()
            running = [t for t in running if t.ident is not None]
    return wait_or_stop(running, stop, sessions, lock) or interrupted


def wait_or_stop(threads: list[Running], stop: threading.Event, sessions: list[DeviceSession],
                 lock: threading.Lock) -> BaseException | None:
    """Wait for the device threads; on `stop` or Ctrl-C, kill the workers in flight and let the threads end.
    Returns the interrupt to re-raise, if there was one."""
    interrupted: BaseException | None = None
    try:
        while any(t.is_alive() for t in threads) and not stop.is_set():
            for t in threads:
                t.join(timeout=0.2)
    except (KeyboardInterrupt, SystemExit) as exc:
        interrupted = exc
        stop.set()
    if stop.is_set():
        with lock:
            workers = [w for session in sessions for w in (session.reference, session.candidate, session.spare)
                       if w is not None]
        for worker in workers:
            try:
                worker.kill()
            except Exception:  # noqa: BLE001 - a worker its own thread is tearing down at the same time
                pass
        for t in threads:
            t.join(timeout=30)
    return interrupted
