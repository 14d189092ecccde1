"""Workers started early: before the driver imports torch or builds its jobs (`solbench run` where the
options name the devices, `run_jobs` for every device first), stopped together at the end, and never left
behind when the run ends before using them. Speed-of-light analyses the on-disk cache holds start no pool."""

from __future__ import annotations

import pytest

from solbench.cli import main as solbench_main
from solbench.orchestrator.analysis import AnalysisPool
from solbench.orchestrator.config import devices_from_options
from solbench.orchestrator.jobs import make_job
from solbench.orchestrator.lifetime import at_once
from solbench.orchestrator.process import WorkerProcess
from solbench.orchestrator.scheduler import run_jobs, start_device_workers
from solbench.orchestrator.session import DeviceSession
from solbench.sol.cache import cached_analyse
from solbench.spec.problem import load_problem
from solbench.spec.trace import Status


@pytest.mark.parametrize(("device", "devices", "cluster", "expected"), [
    ("cpu", None, None, ["cpu"]),
    ("cpu", "0", None, None),  # an error for choose_devices to report
    ("auto", None, None, None),  # every visible GPU: only the machine can tell
    ("cuda", None, None, None),
    ("cuda:1", None, None, ["cuda:1"]),
    ("auto", "0,1, 3", None, ["cuda:0", "cuda:1", "cuda:3"]),
    ("cuda", ["cuda:2", 0], None, ["cuda:2", "cuda:0"]),
    ("auto", "0,gpu", None, None),
    ("auto", "cuda", None, None),
    ("tpu", "0", None, None),
    ("auto", None, "auto", None),
    ("cpu", None, "auto", None),
])
def test_devices_from_options_names_only_what_the_options_decide(device, devices, cluster, expected):
    assert devices_from_options(device, devices, cluster) == expected


def test_run_jobs_uses_the_workers_it_is_given_and_stops_every_one(problem_dir, fast_config, monkeypatch):
    started: list = []
    original_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: (original_start(self), started.append(self.proc)))
    pairs = start_device_workers(["cpu", "cpu"])  # two slots, one job: the second pair is never used
    given = [w.proc for pair in pairs for w in pair]
    traces = run_jobs([make_job(load_problem(problem_dir), None, 1)], fast_config, ["cpu", "cpu"], workers=pairs)
    assert [t.evaluation.status for t in traces] == [Status.PASSED]
    assert started == given  # no other process was started: the given pair served the job
    assert all(proc.poll() is not None for proc in given)


def test_run_jobs_starts_one_pair_per_device_before_any_job(problem_dir, fast_config, monkeypatch):
    started: list = []
    original_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: (original_start(self), started.append(self)))
    problem = load_problem(problem_dir)
    traces = run_jobs([make_job(problem, None, 1), make_job(problem, None, 1)], fast_config, ["cpu", "cpu"])
    assert [t.evaluation.status for t in traces] == [Status.PASSED, Status.PASSED]
    assert [w.role for w in started] == ["reference", "solution"] * 2
    assert all(w.proc is None for w in started)  # stopped and reaped


def test_a_run_that_ends_on_bad_input_leaves_no_early_worker(problem_dir, monkeypatch, tmp_path):
    started: list = []
    original_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: (original_start(self), started.append(self.proc)))
    broken = tmp_path / "set" / "broken"
    broken.mkdir(parents=True)
    (broken / "definition.json").write_text("{not json")
    (broken / "workload.jsonl").write_text("")
    code = solbench_main(["run", str(broken.parent), "--device", "cpu", "-o", str(tmp_path / "t.jsonl")])
    assert code == 2
    assert len(started) == 2  # the options named the CPU: its pair started before the jobs were built
    assert all(proc.poll() is not None for proc in started)


def test_at_once_runs_every_step_then_raises_the_first_error():
    ran: list[str] = []

    def fail() -> None:
        ran.append("fail")
        raise RuntimeError("first")

    with pytest.raises(RuntimeError, match="first"):
        at_once([fail, lambda: ran.append("b"), lambda: ran.append("c")])
    assert sorted(ran) == ["b", "c", "fail"]
    at_once([])


def test_session_close_stops_both_workers_and_the_spare(fast_config):
    session = DeviceSession("cpu", fast_config)
    session.prestart()
    session.spare = WorkerProcess("cpu")
    session.spare.start()
    procs = [session.reference.proc, session.candidate.proc, session.spare.proc]
    session.close()
    assert all(proc.poll() is not None for proc in procs)
    assert session.spare is None and not session.reference.alive and not session.candidate.alive


@pytest.fixture
def pool():
    analysis = AnalysisPool(workers=1)
    yield analysis
    analysis.close()


def test_a_cached_analysis_starts_no_pool_process(problem_dir, pool):
    problem = load_problem(problem_dir)
    workload = problem.workloads[0]
    expected = cached_analyse(problem.definition, workload.axes, scalars=workload.scalar_values())
    future = pool.submit(problem.definition, workload.axes, workload.scalar_values())
    assert future.done() and future.result() == expected
    assert not pool._pool._processes  # nothing was sent to the pool
    other = problem.workloads[1]
    computed = pool.submit(problem.definition, other.axes, other.scalar_values()).result(timeout=120)
    assert computed == cached_analyse(problem.definition, other.axes, scalars=other.scalar_values())


def test_analyses_ahead_go_to_the_pool_at_once_and_are_not_done_twice(problem_dir, tmp_path, monkeypatch, pool):
    monkeypatch.setenv("SOLBENCH_SOL_CACHE", str(tmp_path / "empty-cache"))
    problem = load_problem(problem_dir)
    first, second = problem.workloads[0], problem.workloads[1]
    pool.submit_ahead([(problem.definition, first), (problem.definition, second)])
    assert len(pool._futures) == 2 and pool._pool._processes  # sent, and the pool process is starting
    ahead = pool._futures[next(iter(pool._futures))]
    asked = pool.submit(problem.definition, first.axes, first.scalar_values())
    assert asked is ahead  # the workload's own request gets the analysis already under way
    assert asked.result(timeout=120) == cached_analyse(problem.definition, first.axes, scalars=first.scalar_values())


def test_analyses_ahead_leave_cached_ones_to_be_read_when_asked(problem_dir, pool):
    problem = load_problem(problem_dir)
    workload = problem.workloads[0]
    expected = cached_analyse(problem.definition, workload.axes, scalars=workload.scalar_values())
    pool.submit_ahead([(problem.definition, workload)])
    assert not pool._futures and not pool._pool._processes
    assert pool.submit(problem.definition, workload.axes, workload.scalar_values()).result() == expected


@pytest.mark.parametrize(("devices", "cores", "expected"), [(1, 2, 1), (4, 2, 1), (1, 64, 1), (4, 64, 4),
                                                             (8, 32, 4), (2, 16, 2)])
def test_the_analysis_pool_grows_with_devices_where_the_host_has_cores(devices, cores, expected, monkeypatch):
    from solbench.orchestrator import analysis

    monkeypatch.setattr(analysis.os, "cpu_count", lambda: cores)
    assert analysis.pool_size(devices) == expected
