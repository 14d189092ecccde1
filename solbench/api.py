"""The Python API for programs and agents that call solbench in a loop.

    from solbench import api
    problem = api.load_problem("problem_defs/core/rmsnorm_h4096")
    traces = api.evaluate(problem, "my_rmsnorm.py", device="cuda", max_workloads=4)
    print([t.status for t in traces])

It is the same code path as `solbench run`: worker subprocesses, the same checks, the same traces.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from solbench.report.traces import TraceFile, read_traces
from solbench.runner.config import RunConfig
from solbench.runner.jobs import build_jobs
from solbench.runner.scheduler import Job, run_jobs
from solbench.spec.problem import Problem, load_problem
from solbench.spec.solution import Solution, load_solution, solution_from_source
from solbench.spec.trace import Status, Trace

__all__ = ["RunConfig", "Status", "Trace", "evaluate", "evaluate_source", "load_problem", "load_solution",
           "read_traces", "run_dataset"]


def _config(config: RunConfig | None, overrides: dict[str, Any]) -> RunConfig:
    return replace(config or RunConfig(), **overrides)


def _devices(config: RunConfig, devices: list[str] | None) -> list[str]:
    return devices or [config.resolved_device()]


def evaluate(problem: Problem | str | Path, solution: Solution | str | Path | None = None, *,
             config: RunConfig | None = None, traces_path: str | Path | None = None,
             devices: list[str] | None = None, **overrides: Any) -> list[Trace]:
    """Evaluate one solution (default: the problem's reference) on every workload of one problem.

    `overrides` are `RunConfig` fields (device, trials, max_workloads, iters, ...).
    """
    if not isinstance(problem, Problem):
        problem = load_problem(problem)
    if solution is not None and not isinstance(solution, Solution):
        solution = load_solution(solution, problem.definition)
    config = _config(config, overrides)
    trace_file = TraceFile(traces_path) if traces_path else None
    return run_jobs([Job(problem, solution)], config, _devices(config, devices), trace_file=trace_file)


def evaluate_source(problem: Problem | str | Path, source: str, filename: str = "solution.py", **kwargs: Any) -> list[Trace]:
    """Evaluate source code held in memory (what an agent just wrote) as a bare-file solution."""
    if not isinstance(problem, Problem):
        problem = load_problem(problem)
    return evaluate(problem, solution_from_source(filename, source, problem.definition), **kwargs)


def run_dataset(root: str | Path, solutions: list[str | Path] | None = None, *, config: RunConfig | None = None,
                traces_path: str | Path | None = None, devices: list[str] | None = None,
                **overrides: Any) -> list[Trace]:
    """Evaluate every problem under `root` (with the given solutions, or each problem's reference)."""
    config = _config(config, overrides)
    jobs = build_jobs(Path(root), [Path(s) for s in solutions] if solutions else None)
    trace_file = TraceFile(traces_path) if traces_path else None
    return run_jobs(jobs, config, _devices(config, devices), trace_file=trace_file)
