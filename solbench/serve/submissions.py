"""The service's submissions: the queue the device lanes take from, each submission's state, and its traces,
appended to a file in the service's own folder as each finishes (a stopped service loses none).

A worker that crashes mid-job (its process gone, the reference's or the solution's) ends that workload with
a harness message, not a verdict; the service re-queues those workloads once (`MAX_ATTEMPTS`), and a second
crash is kept as the RUNTIME_ERROR it says. Workloads that finished are never run twice.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.jobs import Job
from solbench.orchestrator.work_queue import WorkItem
from solbench.report.traces import TraceFile, read_traces
from solbench.spec.problem import Problem
from solbench.spec.solution import Solution
from solbench.spec.trace import Status, Trace
from solbench.spec.workload import Workload

# Submissions made within this many seconds of the oldest waiting one are a burst (a CI farm's dataset, a
# `cluster_throughput` run): the costliest of a burst goes first, so the long ones do not start last and hold
# one lane while the others idle; bursts themselves are served in order, so no submission waits on later ones.
BURST_S = 2.0
KEPT_FINISHED = 500  # finished submissions kept in memory; older ones are answered from their files
MAX_ATTEMPTS = 2  # a crashed worker's workloads run once more, then the crash is the verdict
# How a trace says its worker process died under it (orchestrator.process.WorkerDied, session._ask), not
# that the solution failed a check: the harness writes these words at the start of the log.
CRASH_PREFIXES = ("worker exited", "harness failure, this workload is not judged: the reference worker died")
QUEUED, RUNNING, DONE, CANCELLED, FAILED, INTERRUPTED = "queued", "running", "done", "cancelled", "failed", "interrupted"
FINAL_STATES = (DONE, CANCELLED, FAILED, INTERRUPTED)


def worker_crashed(trace: Trace) -> bool:
    """Whether this trace records a worker process that died under the workload."""
    return trace.status == Status.RUNTIME_ERROR and trace.evaluation.log.startswith(CRASH_PREFIXES)


@dataclass
class Submission:
    """One solution (None: the reference) on chosen workloads of one problem, as a client submitted it."""

    id: str
    problem: Problem
    solution: Solution | None
    config: RunConfig
    workloads: tuple[Workload, ...]
    state: str = QUEUED
    attempts: int = 0
    error: str | None = None
    traces: list[dict] = field(default_factory=list)  # as each finished, in trace-file form
    cancel: threading.Event = field(default_factory=threading.Event)
    submitted_s: float = field(default_factory=time.time)
    cost: int = 0  # a relative estimate of its run time (`orchestrator.work_queue.WorkItem.cost`)

    def __post_init__(self) -> None:
        self.cost = WorkItem(self.job(), self.workloads).cost

    def remaining(self) -> tuple[Workload, ...]:
        """The workloads that have no trace yet."""
        done = {t["workload"]["uuid"] for t in self.traces}
        return tuple(w for w in self.workloads if w.uuid not in done)

    def job(self) -> Job:
        return Job(self.problem, self.solution, self.remaining())

    def summary(self) -> dict:
        """What a poll says about the submission, besides its traces."""
        return {"id": self.id, "problem": self.problem.name, "state": self.state, "attempts": self.attempts,
                "workloads": len(self.workloads), "finished": len(self.traces), "error": self.error,
                "submitted_s": self.submitted_s}


class SubmissionBook:
    """Every submission of the service's lifetime, the queue of those waiting, and their files under
    `folder` (`<id>.jsonl`: the traces; `<id>.json`: the summary, rewritten at each change of state)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._all: dict[str, Submission] = {}
        self._waiting: deque[Submission] = deque()
        self._changed = threading.Condition()
        self._closed = False
        self._files: dict[str, TraceFile] = {}
        self.forgotten = 0  # finished submissions answered from their files only

    def add(self, submission: Submission) -> None:
        with self._changed:
            if self._closed:
                raise RuntimeError("the service is stopping")
            self._all[submission.id] = submission
            self._files[submission.id] = TraceFile(self.folder / f"{submission.id}.jsonl")
            self._waiting.append(submission)
            self._save(submission)
            self._changed.notify_all()

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(8)

    def get(self, submission_id: str) -> Submission | None:
        with self._changed:
            return self._all.get(submission_id)

    def take(self, timeout_s: float = 0.5) -> Submission | None:
        """The next submission to evaluate, marked running; None when none came within `timeout_s` or
        the book is closed."""
        with self._changed:
            if not self._waiting and not self._closed:
                self._changed.wait(timeout_s)
            if self._closed or not self._waiting:
                return None
            oldest = self._waiting[0].submitted_s
            submission = max((s for s in self._waiting if s.submitted_s - oldest <= BURST_S), key=lambda s: s.cost)
            self._waiting.remove(submission)
            submission.state = RUNNING
            submission.attempts += 1
            self._save(submission)
            return submission

    def record(self, submission: Submission, trace: Trace) -> None:
        """A finished trace: on disk first (fsync'ed), then visible to polls and streams."""
        self._files[submission.id].append(trace)
        with self._changed:
            submission.traces.append(trace.to_dict())

    def finish(self, submission: Submission, *, crashed: bool, error: str | None = None) -> None:
        """The end of one attempt: re-queued where a worker crashed and an attempt is left, else final."""
        with self._changed:
            if submission.cancel.is_set():
                submission.state = INTERRUPTED if self._closed else CANCELLED
            elif error is not None:
                submission.state, submission.error = FAILED, error
            elif crashed and submission.remaining() and submission.attempts < MAX_ATTEMPTS and not self._closed:
                submission.state = QUEUED
                self._waiting.append(submission)
                self._changed.notify_all()
            else:
                submission.state = DONE
            self._save(submission)
            self._forget_old()

    def cancel(self, submission: Submission) -> None:
        """Cancel a submission: a queued one leaves the queue; a running one's workers are killed by its lane."""
        with self._changed:
            if submission.state in FINAL_STATES:
                return
            submission.cancel.set()
            if submission in self._waiting:
                self._waiting.remove(submission)
                submission.state = INTERRUPTED if self._closed else CANCELLED
                self._save(submission)

    def _forget_old(self) -> None:
        """Drop the oldest finished submissions beyond KEPT_FINISHED from memory (their files stay)."""
        finished = [s.id for s in self._all.values() if s.state in FINAL_STATES]
        for submission_id in finished[:max(0, len(finished) - KEPT_FINISHED)]:
            del self._all[submission_id]
            self._files.pop(submission_id, None)
            self.forgotten += 1

    def counts(self) -> dict[str, int]:
        with self._changed:
            states = [s.state for s in self._all.values()]
        counts = {state: states.count(state) for state in (QUEUED, RUNNING) + FINAL_STATES}
        counts["finished_on_disk_only"] = self.forgotten
        return counts

    def close(self) -> None:
        """Stop handing out work: queued submissions end interrupted, running ones are told to stop."""
        with self._changed:
            self._closed = True
            for submission in self._all.values():
                if submission.state not in FINAL_STATES:
                    submission.cancel.set()
            for submission in self._waiting:
                submission.state = INTERRUPTED
                self._save(submission)
            self._waiting.clear()
            self._changed.notify_all()

    def _save(self, submission: Submission) -> None:
        path = self.folder / f"{submission.id}.json"
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(submission.summary()))
        os.replace(temporary, path)

    def stored(self, submission_id: str) -> tuple[dict, list[dict]] | None:
        """A submission of an earlier run of the service, from its files: (summary, traces); None if unknown.
        One that was queued or running when that service stopped is reported interrupted."""
        if not all(c in "0123456789abcdef" for c in submission_id) or not 0 < len(submission_id) <= 64:
            return None  # ids are 16 hex digits: anything else names no file of the folder
        path = self.folder / f"{submission_id}.json"
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if summary.get("state") not in FINAL_STATES:
            summary["state"] = INTERRUPTED
        traces_path = self.folder / f"{submission_id}.jsonl"
        traces = [t.to_dict() for t in read_traces([traces_path])] if traces_path.is_file() else []
        summary["finished"] = len(traces)
        return summary, traces
