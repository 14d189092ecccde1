"""Workers kept between evaluations (`api.Evaluator`): the same verdicts as one-off runs, a fresh process for
every solution (the spare started ahead), nothing of a solution left running after its run, and workers
that outlive the threads of the run that started them."""

from __future__ import annotations

import threading
import time

import pytest

from solbench import api
from solbench.orchestrator.process import WorkerProcess
from solbench.spec.errors import SpecError
from solbench.spec.trace import Status
from tests.runner.conftest import write_solution

GOOD = "def run(x, y):\n    return x * 2.0 + y\n"
WRONG = "def run(x, y):\n    return x * 3.0 + y\n"
DIES = "import os\n\ndef run(x, y):\n    os._exit(3)\n"


@pytest.fixture
def adoptions(monkeypatch):
    """(pid, requests served before) of every spare a solution's worker took over."""
    taken: list[tuple[int, int]] = []
    original = WorkerProcess.adopt

    def adopt(self, other):
        taken.append((other.proc.pid, other.requests))
        original(self, other)

    monkeypatch.setattr(WorkerProcess, "adopt", adopt)
    return taken


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_kept_workers_give_one_off_verdicts_and_each_solution_a_process_that_saw_no_other_code(
        problem_dir, fast_config, tmp_path, adoptions):
    paths = [write_solution(tmp_path, body, f"s{i}.py") for i, body in enumerate((GOOD, WRONG, GOOD))]
    # s2 is s0's code again: its one-off verdict is s0's (one run of worker processes fewer)
    one_off = [[t.evaluation.status for t in api.evaluate(problem_dir, path, config=fast_config)] for path in paths[:2]]
    one_off.append(one_off[0])
    with api.Evaluator(config=fast_config) as evaluator:
        before = evaluator.worker_pids()["cpu"]
        kept, spares = [], []
        for path in paths:
            kept.append([t.evaluation.status for t in evaluator.evaluate(problem_dir, path)])
            spares.append(evaluator.worker_pids()["cpu"])
        assert kept == one_off == [[Status.PASSED] * 2, [Status.INCORRECT_NUMERICAL] * 2, [Status.PASSED] * 2]
        # one reference process throughout; each later solution ran in the spare the run before left waiting,
        # untouched (no request served), and no two solutions shared a process
        assert {p["reference"] for p in [before, *spares]} == {before["reference"]}
        assert [pid for pid, _ in adoptions] == [s["spare"] for s in spares[:2]]
        assert all(requests == 0 for _, requests in adoptions)
        solution_pids = [before["solution"]] + [pid for pid, _ in adoptions]
        assert len(set(solution_pids)) == 3 and before["reference"] not in solution_pids
        # between runs, the process that ran the last solution is gone (nothing of it lingers)
        assert not any(alive(pid) for pid in solution_pids)
        everything = [before["reference"], *[s["spare"] for s in spares]]
    assert not any(alive(pid) for pid in everything if pid)


def test_a_solution_that_kills_its_worker_leaves_the_next_verdicts_alone(problem_dir, fast_config, tmp_path):
    dies, good = write_solution(tmp_path, DIES, "dies.py"), write_solution(tmp_path, GOOD, "good.py")
    with api.Evaluator(config=fast_config) as evaluator:
        reference = evaluator.worker_pids()["cpu"]["reference"]
        assert {t.evaluation.status for t in evaluator.evaluate(problem_dir, dies)} == {Status.RUNTIME_ERROR}
        assert [t.evaluation.status for t in evaluator.evaluate(problem_dir, good)] == [Status.PASSED] * 2
        assert [t.evaluation.status for t in evaluator.evaluate(problem_dir)] == [Status.PASSED] * 2  # the reference
        assert evaluator.worker_pids()["cpu"]["reference"] == reference


def test_workers_outlive_the_thread_that_made_the_evaluator_and_calls_take_turns(problem_dir, fast_config, tmp_path,
                                                                               monkeypatch):
    from solbench.orchestrator import session_pool

    inside, most = [0], [0]  # runs driving the sessions now, and at most at once
    drive = session_pool.drive_sessions

    def counted(*args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        try:
            time.sleep(0.5)  # a second caller let in meanwhile would be counted
            return drive(*args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(session_pool, "drive_sessions", counted)
    made: list[api.Evaluator] = []
    maker = threading.Thread(target=lambda: made.append(api.Evaluator(config=fast_config)))
    maker.start()
    maker.join()
    evaluator = made[0]
    try:
        time.sleep(1.0)  # a worker killed by its starting thread's exit would be gone by now
        pids = evaluator.worker_pids()["cpu"]
        assert pids["reference"] and pids["solution"] and alive(pids["reference"]) and alive(pids["solution"])
        good, wrong = write_solution(tmp_path, GOOD, "good.py"), write_solution(tmp_path, WRONG, "wrong.py")
        results: dict[str, list[Status]] = {}

        def call(name, path):
            results[name] = [t.evaluation.status for t in evaluator.evaluate(problem_dir, path, max_workloads=1)]

        callers = [threading.Thread(target=call, args=args) for args in (("good", good), ("wrong", wrong))]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        assert results == {"good": [Status.PASSED], "wrong": [Status.INCORRECT_NUMERICAL]}
        assert most == [1]  # the two calls took turns
        assert evaluator.worker_pids()["cpu"]["reference"] == pids["reference"]
    finally:
        evaluator.close()
    assert not alive(pids["reference"])
    for call in (lambda: evaluator.evaluate(problem_dir), evaluator.worker_pids):  # an error, not a wait
        with pytest.raises(RuntimeError, match="closed"):
            call()
    evaluator.close()  # again: nothing left to do


def test_settings_the_workers_were_made_with_cannot_change_per_call(problem_dir, fast_config):
    with api.Evaluator(config=fast_config) as evaluator:
        with pytest.raises(SpecError, match="device"):
            evaluator.evaluate(problem_dir, device="cuda")
        with pytest.raises(SpecError, match="unknown run option"):
            evaluator.evaluate(problem_dir, no_such_option=1)
        assert len(evaluator.evaluate(problem_dir, max_workloads=1)) == 1  # other options do change
        assert len(evaluator.evaluate(problem_dir)) == 2


@pytest.mark.gpu
def test_kept_workers_on_a_gpu_give_one_off_verdicts_for_every_language():
    """The shipped rmsnorm problem's Python solutions (PyTorch, Triton), then its reference, twice over, on kept
    workers: the statuses of one-off runs, one reference process throughout. (CUDA C++ solutions load the same
    way; the gate runs those.)"""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    problem = repo / "problem_defs" / "core" / "rmsnorm_h4096"
    solutions = sorted((repo / "solutions" / problem.name).glob("*.py"))
    settings = {"device": "cuda", "max_workloads": 1, "trials": 1, "timing_rounds": 1, "max_time_s": 0.5}
    one_off = [[t.evaluation.status for t in api.evaluate(problem, s, **settings)] for s in [*solutions, None]]
    assert all(statuses == [Status.PASSED] for statuses in one_off), one_off
    with api.Evaluator(**settings) as evaluator:
        reference = evaluator.worker_pids()["cuda:0"]["reference"]
        for _ in range(2):
            kept = [[t.evaluation.status for t in evaluator.evaluate(problem, s)] for s in [*solutions, None]]
            assert kept == one_off
        assert evaluator.worker_pids()["cuda:0"]["reference"] == reference


HELD_AT_IMPORT = "import time\ntime.sleep(900)\n\ndef run(x, y):\n    return x * 2.0 + y\n"


def test_an_interrupted_call_and_a_bad_problem_leave_the_evaluator_usable(problem_dir, fast_config, tmp_path):
    import _thread
    import signal
    from dataclasses import replace

    held, good = write_solution(tmp_path, HELD_AT_IMPORT, "held.py"), write_solution(tmp_path, GOOD, "good.py")
    config = replace(fast_config, compile_timeout_s=30)  # a missed interrupt ends the held load, not the test run
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises here, whatever ran before
    try:
        with api.Evaluator(config=config) as evaluator:
            session = evaluator._pool.sessions[0]

            def interrupt_once_loading() -> None:  # Ctrl-C once the held solution's load has been sent
                deadline = time.monotonic() + 120
                while session.candidate.requests == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.5)
                _thread.interrupt_main()

            threading.Thread(target=interrupt_once_loading, daemon=True).start()
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                evaluator.evaluate(problem_dir, held)
            assert time.monotonic() - started < 60  # the held load was abandoned, not waited out
            assert [t.evaluation.status for t in evaluator.evaluate(problem_dir, good)] == [Status.PASSED] * 2
            with pytest.raises(SpecError, match="not a problem folder"):
                evaluator.evaluate(tmp_path / "no_such_problem", good)
            assert [t.evaluation.status for t in evaluator.evaluate(problem_dir)] == [Status.PASSED] * 2
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_dead_analysis_process_costs_no_later_call_its_speed_of_light_record(fast_config, tmp_path):
    """A one-off run makes a new analysis pool; a kept one whose process died would refuse every later analysis."""
    import os
    import signal

    from tests.runner.conftest import write_problem

    # problems no other test analysed (the speed-of-light cache is shared by the session's tests)
    first_problem = write_problem(tmp_path / "one", name="axpy_fp32_pool_a", sizes=(72,))
    other = write_problem(tmp_path / "two", name="axpy_fp32_pool_b", sizes=(80,))
    with api.Evaluator(config=fast_config) as evaluator:
        first = evaluator.evaluate(first_problem)
        assert first[0].evaluation.sol is not None
        analysis = evaluator._pool.analysis
        for process in list((analysis._pool._processes or {}).values()):
            os.kill(process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not analysis.broken() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert analysis.broken()
        [trace] = evaluator.evaluate(other)  # a problem the dead pool never analysed
        assert trace.evaluation.status == Status.PASSED and trace.evaluation.sol is not None
        assert not any("analysis failed" in w for w in trace.evaluation.warnings)
