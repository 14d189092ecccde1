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
import shutil
from pathlib import Path

import pytest

from solbench.gate import integrity
from solbench.gate.items import NotATestModule, SolutionFile, is_solution_file
from solbench.gate.state import STATE_KEY, SolbenchState, selected_workloads, state_of
from solbench.orchestrator.options import add_options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("solbench", "grading GPU kernels with solbench")
    group.addoption("--solbench", action="store_true",
                    help="collect solution files (.json, or .py/.cu naming their problem) as tests")
    group.addoption("--solbench-problems", metavar="DIR", help="problem folders (default: ./problem_defs)")
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
    add_options(group.addoption, "plugin")  # the run options of `solbench run`, from the one table


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
    if config.option.verbose == 0:  # one line per item, its workload named while it is judged (minutes on a CPU)
        config.option.verbose = 1
    if not config.getoption("solbench_benchmark_json"):
        config.pluginmanager.register(BenchmarkBannerFilter(), "solbench-benchmark-banner")
    config.pluginmanager.register(integrity, "solbench-integrity")  # no conftest or plugin of the tree
    config.addinivalue_line("markers", "solbench: a (solution, workload) graded by solbench")


class BenchmarkBannerFilter:
    """pytest-benchmark, when installed, heads every session with its settings; a gate that writes no
    benchmark JSON (`--solbench-benchmark-json`) uses none of them, so the line is left out."""

    @pytest.hookimpl(wrapper=True)
    def pytest_report_header(self, config: pytest.Config):
        lines = yield
        return [entry for entry in lines
                if not str(entry if isinstance(entry, str) else (entry or [""])[0]).startswith("benchmark:")]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = state_of(config)
    if state is None:
        return None
    from solbench.report.leaderboard import older_format_note

    baseline = config.getoption("solbench_baseline")
    gate = (f", baseline {baseline} (max regression {state.max_regression:.1%})" if state.baseline is not None else "")
    lines = [f"solbench: problems {state.problems_dir}, device {state.run_config.device}{gate}"]
    note = older_format_note(state.baseline, baseline) if state.baseline is not None else None
    return lines + ([f"solbench: note: {note}"] if note else [])


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    state = state_of(parent.config)
    if state is None:
        return None
    return SolutionFile.from_parent(parent, path=file_path) if is_solution_file(state, file_path) else None


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector):
    """A solution file named on the command line (`--solbench x.baseline.py`) would also be imported
    by pytest as a test module, which fails for names that are not module names; it is ours alone."""
    state = state_of(parent.config)
    if state is not None and is_solution_file(state, module_path):
        return NotATestModule.from_parent(parent, path=module_path)
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Say what is about to be evaluated, where, and that items report as their workloads finish."""
    state = state_of(session.config)
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
    state = state_of(session.config)
    if state is None or state.run is None:
        return
    state.run.stop()
    path = state.option("solbench_benchmark_json")
    if path and state.all_traces:
        from solbench.report.benchmark_json import write_benchmark_json

        write_benchmark_json(state.all_traces, path)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The results as `solbench run` prints them, in their own section after pytest's summary of items."""
    state = state_of(config)
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

    from solbench.report.table import piped_width, print_results

    writer = config.get_terminal_writer()
    width = shutil.get_terminal_size().columns if writer.hasmarkup else piped_width()
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=writer.hasmarkup, color_system="standard"
                      if writer.hasmarkup else None)
    print_results(console, traces, max_rows=200)
    return buffer.getvalue()
