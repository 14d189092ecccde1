"""Where finished traces go: the run's trace file, the list a run returns, and the caller's callback.

A local run (`scheduler.run_jobs`, one thread per device) and a cluster run (`cluster.run_cluster_jobs`,
one thread per remote actor) hand every trace to the same sink, so a trace from either is appended,
counted and reported the same way, and a resumed run skips the same workloads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from solbench.orchestrator.jobs import Job
from solbench.orchestrator.timeline import RunTimeline
from solbench.report.traces import TraceFile
from solbench.spec.trace import Trace
from solbench.spec.workload import Workload


class TraceSink:
    """Thread-safe collector of a run's traces: appended to the trace file (if any) as each arrives."""

    def __init__(self, trace_file: TraceFile | None = None,
                 on_trace: Callable[[Job, Trace], None] | None = None, timeline: RunTimeline | None = None):
        self.trace_file = trace_file
        self.on_trace = on_trace
        self.timeline = timeline  # notes the first and the last trace's arrival
        self.results: list[Trace] = []
        self._lock = threading.Lock()

    def is_done(self, job: Job, workload: Workload, solution_hash: str | None = None) -> bool:
        """Whether the trace file already holds this workload's trace (a resumed run skips it)."""
        if self.trace_file is None:
            return False
        digest = solution_hash or job.resolved_solution().content_hash()
        return self.trace_file.is_done(job.problem.name, digest, workload.uuid)

    def accept(self, job: Job, trace: Trace) -> None:
        if self.trace_file is not None:
            self.trace_file.append(trace)
        with self._lock:
            self.results.append(trace)
        if self.timeline is not None:
            self.timeline.mark("first_trace")
            self.timeline.mark("last_trace", last=True)
        if self.on_trace:
            self.on_trace(job, trace)
