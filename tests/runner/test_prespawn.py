"""Work off the critical path: the next solution's process is started while the current one is evaluated,
a solution this machine cannot judge at all is SKIPPED without starting a process, and the reference
worker builds a trial's inputs while the solution's worker runs the trial."""

from __future__ import annotations

import threading
import time

import pytest

from solbench.orchestrator.jobs import make_job
from solbench.orchestrator.process import WorkerProcess
from solbench.orchestrator.scheduler import run_jobs
from solbench.orchestrator.session import DeviceSession, StepFailed
from solbench.spec.problem import load_problem
from solbench.spec.solution import load_solution
from solbench.spec.trace import Status
from tests.runner.conftest import write_problem, write_solution


def test_the_next_solution_runs_in_the_prestarted_worker_and_no_process_outlives_the_run(
        problem_dir, fast_config, tmp_path, monkeypatch):
    problem = load_problem(problem_dir)
    first = write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 + y\n", "first.py")
    second = write_solution(tmp_path, "import os\n\ndef run(x, y):\n    return (x * 2.0 + y) + 0.0 * os.getpid()\n",
                            "second.py")
    adopted, started = [], []
    original_adopt, original_start = WorkerProcess.adopt, WorkerProcess.start

    def adopt(self, other):
        adopted.append((other.proc.pid, other.requests))
        original_adopt(self, other)

    def start(self):
        original_start(self)
        started.append(self.proc)

    monkeypatch.setattr(WorkerProcess, "adopt", adopt)
    monkeypatch.setattr(WorkerProcess, "start", start)
    jobs = [make_job(problem, load_solution(path, problem.definition), 1) for path in (first, second)]
    traces = run_jobs(jobs, fast_config, ["cpu"])
    assert [t.evaluation.status for t in traces] == [Status.PASSED, Status.PASSED]
    # reference, first solution, the spare; the second solution took the spare (untouched: 0 requests)
    assert len(started) == 3 and len(adopted) == 1
    assert adopted[0][1] == 0 and adopted[0][0] == started[2].pid
    assert all(proc.poll() is not None for proc in started)


@pytest.mark.parametrize("jobs", [1, 2])
def test_no_spare_when_no_job_follows_or_only_references_run(problem_dir, fast_config, monkeypatch, tmp_path, jobs):
    problem = load_problem(problem_dir)
    other = load_problem(write_problem(tmp_path / "more", name="axpy_fp32_b"))
    started = []
    original_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: (original_start(self), started.append(self.proc)))
    traces = run_jobs([make_job(p, None, 1) for p in (problem, other)[:jobs]], fast_config, ["cpu"])
    assert [t.evaluation.status for t in traces] == [Status.PASSED] * jobs
    assert len(started) == 2  # the reference's and the solution's (references in turn): nothing ahead of need


@pytest.mark.parametrize("shadowing", [False, True])
def test_a_solution_this_machine_cannot_judge_is_skipped_without_a_worker(problem_dir, fast_config, tmp_path,
                                                                         shadowing):
    problem = load_problem(problem_dir)
    kernel = tmp_path / ("torch.cu" if shadowing else "kernel.cu")
    kernel.write_text("// solbench: problem=axpy_fp32\n"
                      "torch::Tensor run(torch::Tensor x, torch::Tensor y) { return x * 2 + y; }\n")
    solution = load_solution(kernel, problem.definition)
    session = DeviceSession("cpu", fast_config)
    try:
        if not shadowing:
            with pytest.raises(StepFailed) as failed:
                session.load(session.candidate, problem, solution)
            assert failed.value.status == Status.SKIPPED and "need a CUDA GPU" in failed.value.log
            assert session.candidate.proc is None  # no process was started for it
        else:  # a source named like a harness package: the worker's load decides (REWARD_HACK), as before
            assert session.refusal_here(problem, solution) is None
            with pytest.raises(StepFailed) as failed:
                session.load(session.candidate, problem, solution)
            assert failed.value.status == Status.REWARD_HACK
    finally:
        session.close()


def test_the_reference_builds_each_trials_inputs_during_the_call_and_never_two_requests_at_once(
        problem_dir, fast_config, monkeypatch):
    problem = load_problem(problem_dir)
    spans: list[tuple[int, str, str, float, float]] = []
    original = WorkerProcess.request

    def request(self, req, timeout_s):
        started = time.monotonic()
        try:
            return original(self, req, timeout_s)
        finally:
            spans.append((id(self), req.OP, threading.current_thread().name, started, time.monotonic()))

    monkeypatch.setattr(WorkerProcess, "request", request)
    bad = problem_dir.parent / "bad.py"
    bad.write_text("# solbench: problem=axpy_fp32\ndef run(x, y):\n    return x * 2.0 + y + 1e-3\n")
    jobs = [make_job(problem, None, 2), make_job(problem, load_solution(bad, problem.definition), 1)]
    traces = run_jobs(jobs, fast_config, ["cpu"])
    assert [t.evaluation.status for t in traces] == [Status.PASSED, Status.PASSED, Status.INCORRECT_NUMERICAL]
    prefetched = [s for s in spans if s[2] == "solbench-prefetch"]
    assert prefetched and all(s[1] == "inputs" for s in prefetched)
    judges = [s for s in spans if s[1] == "judge"]
    assert len(prefetched) == 2 * fast_config.trials + 1  # every trial's; the wrong solution ends at trial 0
    assert len(judges) == len(prefetched) + 2 * fast_config.checked_timed_outputs  # and the sampled timed outputs
    for worker in {s[0] for s in spans}:  # one request at a time on each worker's channel
        own = sorted((s[3], s[4]) for s in spans if s[0] == worker)
        assert all(later[0] >= earlier[1] for earlier, later in zip(own, own[1:]))
