"""A device's lane: its warm workers (a `SessionPool` of that device alone) and the thread that feeds it
submissions from the service's queue, one at a time.

One pool per device, not one over all devices: a submission is one problem, so a pool over four GPUs
would leave three idle while it runs; four lanes take four submissions at once. Warm means started and
ready (the reference worker, a solution process that has seen no code, torch imported), never reused: each
submission's solution runs in a process of its own (`SessionPool`), and a cancel kills the lane's workers in
flight, which the next submission gets fresh.
"""

from __future__ import annotations

import threading

from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.jobs import Job
from solbench.orchestrator.process import running_pid
from solbench.orchestrator.session_pool import SessionPool
from solbench.serve.reference_cache import ReferenceTimings
from solbench.serve.submissions import MAX_ATTEMPTS, Submission, SubmissionBook, worker_crashed
from solbench.spec.trace import Trace


class DeviceLane:
    """One device's warm session and the thread that evaluates submissions on it until `close`."""

    def __init__(self, device: str, config: RunConfig, book: SubmissionBook, timings: ReferenceTimings,
                 reuse_eager_reference: bool = True):
        self.device = device
        self.book = book
        self.pool = SessionPool(config, [device])
        for session in self.pool.sessions:
            session.reference_timings = timings  # read by orchestrator.timed when it times the baselines
            session.reuse_eager_reference = reuse_eager_reference  # and the eager reference (unless turned off)
            session.process_per_problem = True  # a reference sent by content never shares a process (reuse_key)
        self.current: Submission | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"solbench-serve-{device}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            submission = self.book.take()
            if submission is None:
                continue
            self.current = submission
            try:
                self.evaluate(submission)
            finally:
                self.current = None

    def evaluate(self, submission: Submission) -> None:
        """One attempt at a submission's remaining workloads; a worker crash re-queues what it hit (once)."""
        crashed: list[str] = []
        retry = submission.attempts < MAX_ATTEMPTS

        def on_trace(_job: Job, trace: Trace) -> None:
            if worker_crashed(trace) and retry:
                crashed.append(trace.workload_uuid)  # not a verdict: evaluated again
            else:
                self.book.record(submission, trace)

        error = None
        try:
            self.pool.run([submission.job()], submission.config, on_trace=on_trace, stop=submission.cancel)
        except Exception as exc:  # noqa: BLE001 - the submission ends failed, saying why; the lane goes on
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
        self.book.finish(submission, crashed=bool(crashed), error=error)

    def status(self) -> dict:
        """The running submission and the lane's worker processes now, read without waiting for a run to end
        (None: not running). Each shared attribute is read once: the lane's thread changes them meanwhile. The
        solution's process is named only once it holds the running submission's solution: between two
        submissions the previous one's process may still be on its way out."""
        session, current = self.pool.sessions[0], self.current
        loaded = session.candidate_job
        reference, candidate, spare = session.reference, session.candidate, session.spare
        mine = (current is not None and loaded is not None
                and loaded[1].content_hash() == current.job().resolved_solution().content_hash())
        return {"running": current.id if current is not None else None,
                "workers": {"reference": running_pid(reference), "solution": running_pid(candidate) if mine else None,
                            "spare": running_pid(spare)}}

    def close(self) -> None:
        """Stop taking work, let the running submission end (the book has told it to stop), stop the workers."""
        self._stopping.set()
        self._thread.join(60)
        self.pool.close()
