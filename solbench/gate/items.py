"""The gate's collection: solution files, and an item per (solution, workload) plus a regression item."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from solbench.gate.state import SolbenchFailure, SolbenchState, selected_workloads, state_of

PYTHON_RUN = re.compile(r"^def\s+run\s*\(", re.M)
CPP_RUN = re.compile(r"\brun\s*\([^;]*\)\s*\{")


class NotATestModule(pytest.File):
    def collect(self):
        return []


def is_solution_file(state: SolbenchState, file_path: Path) -> bool:
    from solbench.languages import PYTHON_SUFFIXES, solution_file_suffixes

    if file_path.suffix not in solution_file_suffixes() or file_path.name.startswith(("_", ".", "test_", "conftest")):
        return False
    if file_path.suffix == ".json":
        if '"sources"' not in file_path.read_text(errors="replace"):
            return False  # some other JSON file
    else:
        from solbench.spec.solution import problem_named_in

        text = file_path.read_text(errors="replace")
        pattern = PYTHON_RUN if file_path.suffix in PYTHON_SUFFIXES else CPP_RUN
        if problem_named_in(text) is None and not pattern.search(text):
            return False  # a helper module, not a solution
    return bool(state.is_solution_file(file_path))


class SolutionFile(pytest.File):
    """One solution file: an item per workload of its problem (and a regression item with a baseline)."""

    problem: Any = None
    solution: Any = None

    def collect(self):
        from solbench.orchestrator.jobs import make_job, problem_of_solution_file
        from solbench.spec.errors import SpecError
        from solbench.spec.solution import load_solution

        state = state_of(self.config)
        try:
            name = problem_of_solution_file(self.path)
            problem = state.problem(name)
            if problem is None:
                broken = [m for m in state.unloadable if f"/{name}/" in m.replace("\\", "/")]
                raise SpecError(f"problem {name!r} could not be loaded: {broken[0]}" if broken else
                                f"{self.path.name} is for problem {name!r}, which is not under {state.problems_dir}")
            self.problem = problem
            self.solution = load_solution(self.path, problem.definition)
        except SpecError as exc:
            yield BrokenSolutionItem.from_parent(self, name="load", message=str(exc))
            return
        workloads = make_job(problem, None, state.run_config.max_workloads).workloads
        for workload, label in zip(workloads, workload_labels(workloads), strict=True):
            yield WorkloadItem.from_parent(self, name=f"{problem.name}[{label}]", workload_uuid=workload.uuid)
        if state.baseline is not None:
            yield RegressionItem.from_parent(self, name=f"regression[{problem.name}]")


def workload_labels(workloads: list) -> list[str]:
    """Each workload named by its axes (`batch_size=8`, several joined by '-' as pytest joins parameters), so
    that item names say what is judged and `-k` can pick them; the uuid where a workload has no axes or
    shares its axes with another."""
    labels = ["-".join(f"{k}={v}" for k, v in w.axes.items()) or w.uuid for w in workloads]
    return [label if labels.count(label) == 1 or label == w.uuid else f"{label}-{w.uuid}"
            for label, w in zip(labels, workloads, strict=True)]


class _SolbenchItem(pytest.Item):
    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, SolbenchFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"solbench {self.name}"  # skips and failures point at the solution file


class BrokenSolutionItem(_SolbenchItem):
    """A solution file that cannot be loaded fails one item instead of aborting the whole collection."""

    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise SolbenchFailure(f"cannot load solution {self.path}: {self.message}")


def describe_failure(trace) -> str:
    """Status, errors and workload axes: what a kernel engineer needs to start fixing it."""
    from solbench.report.merge import hardware_of

    evaluation = trace.evaluation
    axes = ", ".join(f"{k}={v}" for k, v in trace.workload.axes.items()) or "(none)"
    lines = [f"{trace.status.value}: {trace.solution} on {trace.definition}, workload {trace.workload_uuid}",
             f"  axes: {axes}", f"  hardware: {hardware_of(trace)}"]
    corr = evaluation.correctness
    if corr is not None and trace.status.value.startswith("INCORRECT"):
        lines.append(f"  max abs error {corr.max_absolute_error}, max rel error {corr.max_relative_error}, "
                     f"matched {corr.matched_ratio:.4f} (required {trace.workload.tolerance.required_matched_ratio})"
                     + (f", output {corr.output}" if corr.output else "") + (", NaN" if corr.has_nan else "")
                     + (", Inf" if corr.has_inf else ""))
        if corr.message:
            lines.append(f"  {corr.message}")
    if evaluation.log:
        lines += ["  log:"] + ["    " + line for line in evaluation.log.strip().splitlines()[-25:]]
    lines += [f"  warning: {w}" for w in evaluation.warnings]
    return "\n".join(lines)


class WorkloadItem(_SolbenchItem):
    def __init__(self, *, workload_uuid: str, **kwargs):
        super().__init__(**kwargs)
        self.workload_uuid = workload_uuid
        self.add_marker("solbench")

    def runtest(self) -> None:
        from solbench.report.reasons import reason

        state = state_of(self.config)
        trace = state.result(self)
        perf, sol = trace.evaluation.performance, trace.evaluation.sol or {}
        self.user_properties += [("status", trace.status.value),
                                 ("latency_ms", perf.latency_ms if perf else None),
                                 ("speedup", perf.speedup_factor if perf else None),
                                 ("sol_score", sol.get("score"))]
        if trace.status.value == "SKIPPED":
            if state.option("solbench_require_gpu"):
                raise SolbenchFailure("SKIPPED although --solbench-require-gpu is set:\n" + describe_failure(trace))
            # reported at the item's location (the solution file), not at this line of the plugin
            raise pytest.skip.Exception(f"{self.name}: {reason(trace)}", _use_item_location=True)
        if trace.status.failed:
            raise SolbenchFailure(describe_failure(trace))
        min_score = state.option("solbench_min_score")
        if min_score is not None:
            score = sol.get("score")
            if not isinstance(score, (int, float)):
                raise SolbenchFailure(f"--solbench-min-score {min_score}: no SOL score in the trace (n/a) for "
                                      f"{trace.solution} on {trace.definition}[{trace.workload_uuid}]")
            if score < min_score:
                raise SolbenchFailure(f"SOL score {score:.3f} < {min_score} for {trace.solution} on "
                                      f"{trace.definition}[{trace.workload_uuid}] (latency {perf.latency_ms:.5g} ms, "
                                      f"T_SOL {sol.get('t_sol_ms', 'n/a')} ms)")


class RegressionItem(_SolbenchItem):
    """Gate one solution's geometric-mean latency against the baseline leaderboard."""

    def runtest(self) -> None:
        from solbench.report.regression import check

        state = state_of(self.config)
        run = state.start(self.session)
        if state.device_error or state.gpu_error:
            raise SolbenchFailure(state.device_error or state.gpu_error)
        uuids = next((u for path, (_, u) in selected_workloads(self.session).items() if path == self.path), [])
        traces = [t for t in (run.wait_for(str(self.path), u) for u in uuids) if t is not None]
        if not traces:
            raise pytest.skip.Exception("no workload of this solution was selected", _use_item_location=True)
        verdict = check(traces, state.baseline, state.max_regression)
        self.user_properties.append(("regression", verdict.message))
        if verdict.regressed:
            raise SolbenchFailure(verdict.message)
        if not verdict.comparable:
            raise pytest.skip.Exception(verdict.message, _use_item_location=True)


