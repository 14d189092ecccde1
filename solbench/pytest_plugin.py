"""pytest plugin: `pytest --solbench solutions/` grades solution files, one test item per (solution, workload).

Registered through the `pytest11` entry point; inert unless `--solbench` is given (no collection
changes, no output). Evaluation goes through the same path as `solbench run` (`build`-style jobs and
`solbench.orchestrator.scheduler.run_jobs`): when the first item runs, the selected (solution, workloads)
jobs start in one scheduler call in a background thread, spread over the devices, in collection
order; each item waits for its own workload only, so items report as their workloads finish. When the
session ends (done, `-x`, Ctrl-C) the evaluation is stopped: what finished is kept (reported items,
traces, the pytest-benchmark JSON), the workers in flight are killed. The result table goes in a
terminal-summary section. With `--solbench-baseline`, one extra `regression[PROBLEM]` item per
solution gates its speed against a leaderboard CSV. Exit codes are pytest's (docs/ci.md).
"""

from __future__ import annotations

import io
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

STATE_KEY = pytest.StashKey["SolbenchState"]()
RUN_FUNCTION = {".py": re.compile(r"^def\s+run\s*\(", re.M), ".cu": re.compile(r"\brun\s*\([^;]*\)\s*\{")}


class SolbenchFailure(Exception):
    """A graded failure: shown as its message, without a Python traceback from the harness."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("solbench", "grading GPU kernels with solbench")
    group.addoption("--solbench", action="store_true",
                    help="collect solution files (.json, or .py/.cu naming their problem) as tests")
    group.addoption("--solbench-problems", metavar="DIR", help="problem folders (default: ./problem_defs)")
    group.addoption("--solbench-device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    group.addoption("--solbench-traces", metavar="FILE", help="append the traces here (JSON Lines)")
    group.addoption("--solbench-benchmark-json", metavar="FILE",
                    help="also write the timings in pytest-benchmark's JSON format (for pytest-benchmark compare)")
    group.addoption("--solbench-min-score", type=float, metavar="X",
                    help="fail a passed workload whose SOL score is below X (0..1)")
    group.addoption("--solbench-baseline", metavar="CSV", help="leaderboard CSV of recorded results to gate against")
    group.addoption("--solbench-max-regression", default="5%", metavar="P",
                    help="with --solbench-baseline: fail when the geometric-mean latency is more than P slower "
                         "(e.g. 5%% or 0.05) and beyond the measured noise (default 5%%)")
    group.addoption("--solbench-require-gpu", action="store_true",
                    help="fail (instead of skip) what cannot run without a GPU, and everything when none is visible")
    group.addoption("--solbench-max-workloads", type=int, metavar="N", help="only the first N workloads per problem")
    group.addoption("--solbench-no-cuda-graphs", action="store_true",
                    help="CUDA: time every call as launched, not replays of its CUDA graph (docs/timing.md)")
    group.addoption("--solbench-no-strict", action="store_true",
                    help="judge with the official tolerance rules only; by default a CI gate also fails what the "
                         "numerics flags catch (far outliers, mismatches in whole rows/columns, systematic bias)")
    group.addoption("--solbench-cluster", metavar="ADDRESS",
                    help="run over a Ray cluster: auto, ray, ray://HOST:PORT or HOST:PORT (docs/cluster.md)")
    group.addoption("--solbench-quick", action="store_true",
                    help="smoke-test timing (1 trial, 3 iterations); timings are not meaningful")


class BackgroundRun:
    """The selected jobs, evaluated in a thread while pytest runs the items: an item waits for its own
    workload only, so it reports as soon as that workload finishes; `stop` ends the run, keeping what
    finished (the scheduler kills the workers in flight and drops what they would have reported)."""

    def __init__(self, jobs: list, origin: dict[int, str], config, devices: list[str], trace_file) -> None:
        self.jobs, self.origin, self.config, self.devices, self.trace_file = jobs, origin, config, devices, trace_file
        self.traces: dict[tuple[str, str], Any] = {}  # (solution file, workload uuid) -> Trace
        self.order: list = []  # traces as they finished
        self.error: str | None = None
        self.finished = False
        self.changed = threading.Condition()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="solbench-plugin", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        from solbench.orchestrator.scheduler import run_jobs  # looked up when called: tests stand in for it

        try:
            run_jobs(self.jobs, self.config, self.devices, on_trace=self._on_trace, stop=self.stop_event)
        except Exception as exc:  # noqa: BLE001 - every waiting item reports it instead of one traceback
            self.error = f"the evaluation stopped: {type(exc).__name__}: {exc}"
        finally:
            with self.changed:
                self.finished = True
                self.changed.notify_all()

    def _on_trace(self, job, trace) -> None:
        if self.trace_file is not None:  # appended here, not by run_jobs: its resume would skip the items' work
            self.trace_file.append(trace)
        with self.changed:
            self.traces[(self.origin[id(job)], trace.workload_uuid)] = trace
            self.order.append(trace)
            self.changed.notify_all()

    def wait_for(self, path: str, workload_uuid: str):
        """The trace of one workload once it exists; None when the run ended without it. Ctrl-C while
        waiting interrupts the session (the wait wakes up twice a second)."""
        key = (path, workload_uuid)
        with self.changed:
            while key not in self.traces and not self.finished:
                self.changed.wait(timeout=0.5)
            return self.traces.get(key)

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout=120)


@dataclass
class SolbenchState:
    """Session-wide: options, problems by name, the one evaluation of all selected jobs, its traces."""

    config: pytest.Config
    problems_dir: Path
    baseline: Any = None  # pandas.DataFrame
    max_regression: float = 0.05
    problems: dict[str, Any] | None = None
    solution_dirs: dict[Path, set[Path]] = field(default_factory=dict)
    run: BackgroundRun | None = None
    run_config: Any = None  # RunConfig, checked when the session is configured
    devices: list[str] | None = None
    gpu_error: str | None = None
    device_error: str | None = None

    @property
    def all_traces(self) -> list:
        return list(self.run.order) if self.run is not None else []

    def option(self, name: str):
        return self.config.getoption(name)

    def problem(self, name: str):
        from solbench.orchestrator.jobs import load_problems

        if self.problems is None:  # the same loading (and duplicate-name check) as `solbench run`
            self.problems = {problem.name: problem for problem in load_problems(Path(self.problems_dir))}
        return self.problems.get(name)

    def is_solution_file(self, path: Path) -> bool:
        """Solution files as `solbench run` finds them (JSON sources of another solution excluded)."""
        from solbench.orchestrator.jobs import solution_files

        folder = path.parent
        if folder not in self.solution_dirs:
            self.solution_dirs[folder] = set(solution_files([folder]))
        return path in self.solution_dirs[folder]

    def configure_run(self) -> None:
        """The plugin's options, named as every door names them (`orchestrator.config.configure`); an
        explicit request that cannot be met (`--solbench-device cuda` without a GPU) is a usage error."""
        from solbench.orchestrator.config import choose_devices, configure
        from solbench.spec.errors import SpecError

        try:
            self.run_config = configure(device=self.option("solbench_device"),
                                        max_workloads=self.option("solbench_max_workloads"),
                                        cuda_graphs=not self.option("solbench_no_cuda_graphs"),
                                        quick=self.option("solbench_quick"),
                                        strict=not self.option("solbench_no_strict"),
                                        cluster=self.option("solbench_cluster"))
            if self.run_config.device != "auto":
                self.devices = choose_devices(self.run_config, None)
        except SpecError as exc:
            raise pytest.UsageError(f"--solbench: {exc}") from None

    def chosen_devices(self) -> list[str]:
        from solbench.orchestrator.config import choose_devices

        if self.devices is None:
            self.devices = choose_devices(self.run_config, None)
        return self.devices

    def start(self, session: pytest.Session) -> BackgroundRun | None:
        """Start evaluating every selected item's (solution, workloads), once, in one scheduler call."""
        if self.run is not None or self.gpu_error or self.device_error:
            return self.run
        from solbench.orchestrator.jobs import make_job
        from solbench.report.traces import TraceFile
        from solbench.spec.errors import SpecError

        try:
            devices = self.chosen_devices()
        except SpecError as exc:
            self.device_error = str(exc)
            return None
        if (self.option("solbench_require_gpu") and not self.run_config.cluster
                and not any(d.startswith("cuda") for d in devices)):
            self.gpu_error = "--solbench-require-gpu is set but no CUDA GPU is visible; nothing was run"
            return None
        jobs, origin = [], {}
        for path, (parent, uuids) in selected_workloads(session).items():
            job = make_job(parent.problem, parent.solution, uuids=set(uuids))
            jobs.append(job)
            origin[id(job)] = str(path)
        trace_file = TraceFile(self.option("solbench_traces")) if self.option("solbench_traces") else None
        self.run = BackgroundRun(jobs, origin, self.run_config, devices, trace_file)
        self.run.start()
        return self.run

    def result(self, item: pytest.Item):
        """The item's trace, waiting for it; SolbenchFailure when the run cannot give one."""
        run = self.start(item.session)
        if self.device_error or self.gpu_error:
            raise SolbenchFailure(self.device_error or self.gpu_error)
        trace = run.wait_for(str(item.path), item.workload_uuid)
        if trace is None:
            raise SolbenchFailure(run.error or f"no result for workload {item.workload_uuid} "
                                               f"(the evaluation did not produce one)")
        return trace


def selected_workloads(session: pytest.Session) -> dict[Path, tuple[Any, list[str]]]:
    """Solution file -> (its collector, the uuids of its selected workload items), in collection order."""
    selected: dict[Path, tuple[SolutionFile, list[str]]] = {}
    for item in session.items:
        if isinstance(item, WorkloadItem):
            selected.setdefault(item.parent.path, (item.parent, []))[1].append(item.workload_uuid)
    return selected


def _state(config: pytest.Config) -> SolbenchState | None:
    return config.stash.get(STATE_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("solbench", False):
        return
    from solbench.orchestrator.jobs import repo_default
    from solbench.spec.errors import SpecError

    problems = config.getoption("solbench_problems")
    problems_dir = Path(problems) if problems else repo_default("problem_defs")
    if not problems_dir.is_dir():
        raise pytest.UsageError(f"--solbench: problem folder {problems_dir} does not exist (--solbench-problems DIR)")
    state = SolbenchState(config, problems_dir)
    min_score = config.getoption("solbench_min_score")
    if min_score is not None and not 0 <= min_score <= 1:
        raise pytest.UsageError("--solbench-min-score must be between 0 and 1")
    baseline = config.getoption("solbench_baseline")
    try:
        if baseline:
            from solbench.report.leaderboard import read_leaderboard
            from solbench.report.regression import parse_fraction

            state.baseline = read_leaderboard(baseline)
            state.max_regression = parse_fraction(config.getoption("solbench_max_regression"))
    except SpecError as exc:
        raise pytest.UsageError(f"--solbench-baseline: {exc}") from None
    if config.getoption("solbench_benchmark_json"):
        try:
            import pytest_benchmark  # noqa: F401 - optional: its JSON is written by its own code
        except ImportError:
            raise pytest.UsageError("--solbench-benchmark-json needs pytest-benchmark "
                                    "(pip install pytest-benchmark, or solbench[test])") from None
    state.configure_run()
    config.stash[STATE_KEY] = state
    config.addinivalue_line("markers", "solbench: a (solution, workload) graded by solbench")


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = _state(config)
    if state is None:
        return None
    gate = (f", baseline {config.getoption('solbench_baseline')} (max regression {state.max_regression:.1%})"
            if state.baseline is not None else "")
    return [f"solbench: problems {state.problems_dir}, device {config.getoption('solbench_device')}{gate}"]


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    state = _state(parent.config)
    if state is None:
        return None
    return SolutionFile.from_parent(parent, path=file_path) if _is_solution_file(state, file_path) else None


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector):
    """A solution file named on the command line (`--solbench x.baseline.py`) would also be imported
    by pytest as a test module, which fails for names that are not module names; it is ours alone."""
    state = _state(parent.config)
    if state is not None and _is_solution_file(state, module_path):
        return _NotATestModule.from_parent(parent, path=module_path)
    return None


class _NotATestModule(pytest.File):
    def collect(self):
        return []


def _is_solution_file(state: SolbenchState, file_path: Path) -> bool:
    from solbench.orchestrator.jobs import SOLUTION_SUFFIXES

    if file_path.suffix not in SOLUTION_SUFFIXES or file_path.name.startswith(("_", ".", "test_", "conftest")):
        return False
    if file_path.suffix == ".json":
        if '"sources"' not in file_path.read_text(errors="replace"):
            return False  # some other JSON file
    else:
        from solbench.spec.solution import problem_named_in

        text = file_path.read_text(errors="replace")
        pattern = RUN_FUNCTION.get(file_path.suffix, RUN_FUNCTION[".py"])
        if problem_named_in(text) is None and not pattern.search(text):
            return False  # a helper module, not a solution
    return bool(state.is_solution_file(file_path))


class SolutionFile(pytest.File):
    """One solution file: an item per workload of its problem (and a regression item with a baseline)."""

    problem: Any = None
    solution: Any = None

    def collect(self):
        from solbench.orchestrator.jobs import problem_of_solution_file
        from solbench.spec.errors import SpecError
        from solbench.spec.solution import load_solution

        state = _state(self.config)
        try:
            name = problem_of_solution_file(self.path)
            problem = state.problem(name)
            if problem is None:
                raise SpecError(f"{self.path.name} is for problem {name!r}, which is not under {state.problems_dir}")
            self.problem = problem
            self.solution = load_solution(self.path, problem.definition)
        except SpecError as exc:
            yield BrokenSolutionItem.from_parent(self, name="load", message=str(exc))
            return
        limit = state.option("solbench_max_workloads")
        workloads = problem.workloads[:limit] if limit else problem.workloads
        for workload in workloads:
            yield WorkloadItem.from_parent(self, name=f"{problem.name}[{workload.uuid}]", workload_uuid=workload.uuid)
        if state.baseline is not None:
            yield RegressionItem.from_parent(self, name=f"regression[{problem.name}]")


class _SolbenchItem(pytest.Item):
    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, SolbenchFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"solbench {self.name}"


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
    axes = ", ".join(f"{k}={v}" for k, v in trace.workload.get("axes", {}).items()) or "(none)"
    lines = [f"{trace.status.value}: {trace.solution} on {trace.definition}, workload {trace.workload_uuid}",
             f"  axes: {axes}", f"  hardware: {hardware_of(trace)}"]
    corr = evaluation.correctness
    if corr is not None and trace.status.value.startswith("INCORRECT"):
        lines.append(f"  max abs error {corr.max_absolute_error}, max rel error {corr.max_relative_error}, "
                     f"matched {corr.matched_ratio:.4f} (required {trace.workload.get('tolerance', {}).get('required_matched_ratio', 'n/a')})"
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

        state = _state(self.config)
        trace = state.result(self)
        perf, sol = trace.evaluation.performance, trace.evaluation.sol or {}
        self.user_properties += [("status", trace.status.value),
                                 ("latency_ms", perf.latency_ms if perf else None),
                                 ("speedup", perf.speedup_factor if perf else None),
                                 ("sol_score", sol.get("score"))]
        if trace.status.value == "SKIPPED":
            if state.option("solbench_require_gpu"):
                raise SolbenchFailure("SKIPPED although --solbench-require-gpu is set:\n" + describe_failure(trace))
            pytest.skip(f"{trace.definition}[{trace.workload_uuid}]: {reason(trace)}")
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

        state = _state(self.config)
        run = state.start(self.session)
        if state.device_error or state.gpu_error:
            raise SolbenchFailure(state.device_error or state.gpu_error)
        uuids = next((u for path, (_, u) in selected_workloads(self.session).items() if path == self.path), [])
        traces = [t for t in (run.wait_for(str(self.path), u) for u in uuids) if t is not None]
        if not traces:
            pytest.skip("no workload of this solution was selected")
        verdict = check(traces, state.baseline, state.max_regression)
        self.user_properties.append(("regression", verdict.message))
        if verdict.regressed:
            raise SolbenchFailure(verdict.message)
        if not verdict.comparable:
            pytest.skip(verdict.message)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Say what is about to be evaluated, where, and that items report as their workloads finish."""
    state = _state(session.config)
    if state is None or session.config.option.collectonly:
        return
    selected = selected_workloads(session)
    if not selected:
        return
    from solbench.orchestrator.config import auto_fallback_note
    from solbench.spec.errors import SpecError

    try:
        devices = state.chosen_devices()
    except SpecError:
        return  # every item reports it
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    workloads = sum(len(uuids) for _, uuids in selected.values())
    note = auto_fallback_note(state.run_config, devices)
    reporter.write_line(f"solbench: {workloads} workload(s) of {len(selected)} solution file(s) on "
                        f"{', '.join(devices)}; each item reports when its workload finishes"
                        + (f" ({note})" if note else ""))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the evaluation (done, -x or Ctrl-C), keeping what finished; write the pytest-benchmark JSON."""
    state = _state(session.config)
    if state is None or state.run is None:
        return
    state.run.stop()
    path = state.option("solbench_benchmark_json")
    if path and state.all_traces:
        from solbench.report.benchmark_json import write_benchmark_json

        write_benchmark_json(state.all_traces, path)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The results as `solbench run` prints them, in their own section after pytest's summary of items."""
    state = _state(config)
    if state is None or not state.all_traces:
        return
    traces = state.all_traces
    terminalreporter.section("solbench")
    terminalreporter.write(render_tables(traces, config))
    written = [f"traces appended to {p}" for p in [config.getoption("solbench_traces")] if p]
    written += [f"pytest-benchmark JSON in {p}" for p in [config.getoption("solbench_benchmark_json")] if p]
    terminalreporter.write_line(f"solbench: {len(traces)} workload(s) evaluated"
                                + (f"; {'; '.join(written)}" if written else ""))


def render_tables(traces: list, config: pytest.Config) -> str:
    """The workload and summary tables, the reasons and the speed-of-light note, as text for pytest's terminal."""
    from rich.console import Console

    from solbench.report.table import PIPED_WIDTH, print_results

    writer = config.get_terminal_writer()
    width = shutil.get_terminal_size().columns if writer.hasmarkup else PIPED_WIDTH
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=writer.hasmarkup, color_system="standard"
                      if writer.hasmarkup else None)
    print_results(console, traces, max_rows=200)
    return buffer.getvalue()
