"""The Python API for programs and agents that call solbench in a loop.

    from solbench import api
    problem = api.load_problem("problem_defs/core/rmsnorm_h4096")
    traces = api.evaluate(problem, "my_rmsnorm.py", device="cuda", max_workloads=4)
    print([t.status for t in traces])

It is the same code path as `solbench run`: the same option names (`RunConfig` fields, through
`solbench.orchestrator.config.configure`), the same device choice (every visible GPU unless `devices`
or a single `device` says otherwise), worker subprocesses, the same checks, the same traces. With
`cluster="auto"` (or a Ray address) the work runs over a Ray cluster instead (docs/cluster.md).

Each `evaluate` call starts its workers and stops them when it returns, which costs seconds on a GPU
(torch, a CUDA context). A program asking for many verdicts keeps them instead:

    with api.Evaluator(device="cuda", max_workloads=4) as evaluator:
        for source in candidates:
            traces = evaluator.evaluate_source(problem, source)

A program on another machine, or many programs sharing one host's GPUs, asks a running `solbench serve`
instead (docs/agents.md): `Client` submits, streams, polls and cancels there, with the same options and traces.

    client = api.Client("http://127.0.0.1:8470")
    traces = client.evaluate_source(problem_folder, source, max_workloads=4)

In a script, call solbench under `if __name__ == "__main__":`: the analysis pool's processes are started with
multiprocessing's `spawn`, which imports the main script again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from solbench.orchestrator.config import RunConfig, choose_devices, configure
from solbench.orchestrator.jobs import Job, build_jobs, make_job
from solbench.orchestrator.scheduler import run_jobs
from solbench.report.traces import TraceFile, read_traces
from solbench.serve.client import Client, ServiceError
from solbench.spec.problem import Problem, load_problem
from solbench.spec.solution import Solution, load_solution, solution_from_source
from solbench.spec.trace import Status, Trace

__all__ = ["Client", "Evaluator", "ServiceError", "RunConfig", "Status", "Trace", "evaluate", "evaluate_source", "load_problem",
           "load_solution", "read_traces", "run_dataset"]


def evaluate(problem: Problem | str | Path, solution: Solution | str | Path | None = None, *,
             config: RunConfig | None = None, traces_path: str | Path | None = None,
             devices: list[str] | str | None = None, **options: Any) -> list[Trace]:
    """Evaluate one solution (default: the problem's reference) on the workloads of one problem.

    `options` are `RunConfig` fields (device, trials, max_workloads, iters, ...) plus `quick` and
    `baseline_csv`, as `solbench run` takes them.
    """
    problem, solution = _resolve(problem, solution)
    config = configure(config, **options)
    trace_file = TraceFile(traces_path) if traces_path else None
    return run_jobs(_jobs(config, problem, solution), config, choose_devices(config, devices), trace_file=trace_file)


def _jobs(config: RunConfig, target: Problem | str | Path, solutions: Solution | list | None) -> list[Job]:
    """The jobs of one call: a problem with one solution (None: its reference), or a dataset folder with its
    solution files (None: each problem's reference). The workload limit is the config's, read here only."""
    if isinstance(target, Problem):
        return [make_job(target, solutions, config.max_workloads)]
    return build_jobs(Path(target), [Path(s) for s in solutions] if solutions else None, config.max_workloads)


def _resolve(problem: Problem | str | Path, solution: Solution | str | Path | None) -> tuple[Problem, Solution | None]:
    if not isinstance(problem, Problem):
        problem = load_problem(problem)
    if solution is not None and not isinstance(solution, Solution):
        solution = load_solution(solution, problem.definition)
    return problem, solution


def evaluate_source(problem: Problem | str | Path, source: str, filename: str = "solution.py", **kwargs: Any) -> list[Trace]:
    """Evaluate source code held in memory (what an agent just wrote) as a bare-file solution."""
    problem, _ = _resolve(problem, None)
    return evaluate(problem, solution_from_source(filename, source, problem.definition), **kwargs)


def run_dataset(root: str | Path, solutions: list[str | Path] | None = None, *, config: RunConfig | None = None,
                traces_path: str | Path | None = None, devices: list[str] | str | None = None,
                **options: Any) -> list[Trace]:
    """Evaluate every problem under `root` (with the given solutions, or each problem's reference)."""
    config = configure(config, **options)
    trace_file = TraceFile(traces_path) if traces_path else None
    return run_jobs(_jobs(config, root, solutions), config, choose_devices(config, devices), trace_file=trace_file)


class Evaluator:
    """Workers kept between evaluations, for a program or an agent that asks for many verdicts: the
    start-up a one-off `evaluate` pays every time (seconds on a GPU) is paid once, when the Evaluator
    is made. Every verdict is the one `evaluate` would give: each solution still runs in a fresh
    process that has seen no other code (started ahead, while the previous one was judged), and the
    reference worker, trusted code, serves every problem in turn.

    `options` (and `config`, `devices`) are `evaluate`'s; a call may override any option but the
    device, `cluster` and `lock_clocks`. Calls from several threads take turns. `close()` (or leaving
    the `with` block) stops the workers.
    """

    def __init__(self, *, config: RunConfig | None = None, devices: list[str] | str | None = None,
                 **options: Any):
        from solbench.orchestrator.session_pool import SessionPool  # inner: starts processes, imports torch

        self.config = configure(config, **options)
        self._pool = SessionPool(self.config, choose_devices(self.config, devices))

    def evaluate(self, problem: Problem | str | Path, solution: Solution | str | Path | None = None, *,
                 traces_path: str | Path | None = None, **options: Any) -> list[Trace]:
        """As `api.evaluate`, on the kept workers."""
        problem, solution = _resolve(problem, solution)
        config = configure(self.config, **options)
        return self._pool.run(_jobs(config, problem, solution), config,
                              trace_file=TraceFile(traces_path) if traces_path else None)

    def evaluate_source(self, problem: Problem | str | Path, source: str, filename: str = "solution.py",
                        **kwargs: Any) -> list[Trace]:
        """As `api.evaluate_source`, on the kept workers."""
        problem, _ = _resolve(problem, None)
        return self.evaluate(problem, solution_from_source(filename, source, problem.definition), **kwargs)

    def run_dataset(self, root: str | Path, solutions: list[str | Path] | None = None, *,
                    traces_path: str | Path | None = None, **options: Any) -> list[Trace]:
        """As `api.run_dataset`, on the kept workers."""
        config = configure(self.config, **options)
        return self._pool.run(_jobs(config, root, solutions), config,
                              trace_file=TraceFile(traces_path) if traces_path else None)

    def worker_pids(self) -> dict[str, dict[str, int | None]]:
        """Per device, the process ids of the kept workers (reference, solution, spare; None: not running)."""
        return self._pool.worker_pids()

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
