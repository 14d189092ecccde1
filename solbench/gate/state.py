"""The gate's session state: its options, the problems, and the one background evaluation of every
selected (solution, workloads) job that the items wait on."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

STATE_KEY = pytest.StashKey["SolbenchState"]()


class SolbenchFailure(Exception):
    """A graded failure: shown as its message, without a Python traceback from the harness."""


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
    unloadable: list[str] = field(default_factory=list)  # problems that could not be loaded, with their reasons

    @property
    def all_traces(self) -> list:
        return list(self.run.order) if self.run is not None else []

    def option(self, name: str):
        return self.config.getoption(name)

    def problem(self, name: str):
        from solbench.orchestrator.jobs import load_problems

        if self.problems is None:  # the same loading (and duplicate-name check) as `solbench run`; a broken
            self.unloadable = []  # problem fails its own solutions' items only (`SolutionFile.collect`)
            loaded = load_problems(Path(self.problems_dir), self.unloadable)
            self.problems = {problem.name: problem for problem in loaded}
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
        from solbench.orchestrator.options import gate_base, given_options
        from solbench.spec.errors import SpecError

        try:
            self.run_config = configure(gate_base(), **given_options(self.option, "plugin"))
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
    """Solution file -> (its collector, the uuids of its selected workload items), in collection order.
    Workload items are the ones marked `solbench` (`items.WorkloadItem`)."""
    selected: dict[Path, tuple[Any, list[str]]] = {}
    for item in session.items:
        if item.get_closest_marker("solbench") is not None and hasattr(item, "workload_uuid"):
            selected.setdefault(item.parent.path, (item.parent, []))[1].append(item.workload_uuid)
    return selected


def state_of(config: pytest.Config) -> SolbenchState | None:
    return config.stash.get(STATE_KEY, None)


