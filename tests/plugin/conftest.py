"""Running pytest with the solbench plugin in-process, against a stand-in for the runner.

The stand-in (`fake_runner`) replaces `solbench.orchestrator.scheduler.run_jobs`, the one call the plugin
makes to evaluate, and decides each workload's trace from `fake: key=value` comments in the
solution's source (status, latency_ms, score). That keeps plugin tests fast and exact; the real
runner is exercised in test_plugin_e2e.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.report.conftest import make_trace, sol
from tests.runner.conftest import write_problem

FAKE_HARDWARE = "Fake CPU"


@dataclass
class Outcome:
    ret: int
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> passed/failed/skipped
    messages: dict[str, str] = field(default_factory=dict)  # nodeid -> failure text or skip reason
    output: str = ""


class Recorder:
    def __init__(self, outcome: Outcome):
        self.outcome = outcome

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.outcome.outcomes[report.nodeid] = report.outcome
            text = report.longreprtext
            if report.skipped and isinstance(report.longrepr, tuple):
                text = report.longrepr[2]
            self.outcome.messages[report.nodeid] = text


def run_pytest(where: Path, *args: str, capsys=None) -> Outcome:
    """`pytest -p solbench.pytest_plugin ARGS` in `where`, with no ini file of the project, in this process
    (`--solbench-trust-tree`: the stand-in runner replaces a function of this process)."""
    outcome = Outcome(ret=-1)
    ini = where / "pytest.ini"
    if not ini.exists():
        ini.write_text("[pytest]\n")
    import os

    cwd = os.getcwd()
    os.chdir(where)
    try:
        # In-process pytest: the plugin module is already imported, so its assertion rewriting is moot.
        outcome.ret = int(pytest.main(["-p", "solbench.pytest_plugin", "-p", "no:cacheprovider", "-c", str(ini),
                                       "-W", "ignore::pytest.PytestAssertRewriteWarning",
                                       "--rootdir", str(where), "-rs", "--solbench-trust-tree", *args], plugins=[Recorder(outcome)]))
    finally:
        os.chdir(cwd)
    if capsys is not None:
        outcome.output = capsys.readouterr().out
    return outcome


def fake_run_jobs(jobs, config, devices, *, trace_file=None, on_trace=None, on_job_start=None, stop=None):
    traces = []
    gpu = any(d.startswith("cuda") for d in devices)
    for job in jobs:
        if stop is not None and stop.is_set():
            break
        solution = job.resolved_solution()
        text = "\n".join(s.content for s in solution.sources)
        marks = dict(re.findall(r"fake:\s*(\w+)=(\S+)", text))
        for workload in job.workloads:
            if solution.spec.languages == ("cuda_cpp",) and not gpu:
                status, log = "SKIPPED", "CUDA C++ solutions need a CUDA GPU; none is visible"
            else:
                status, log = marks.get("status", "PASSED"), marks.get("log", "").replace("_", " ")
            latency = float(marks.get("latency_ms", 1.0))
            score = float(marks["score"]) if "score" in marks else None
            trace = make_trace(job.problem.name, solution.name, workload.uuid, status=status, latency_ms=latency,
                               rel_ci=0.01, reference_ms=2.0, hardware=FAKE_HARDWARE, axes=dict(workload.axes),
                               solution_hash=solution.content_hash(), log=log,
                               sol={**sol(latency / 4, latency), "score": score} if score is not None else None)
            traces.append(trace)
            if trace_file is not None:
                trace_file.append(trace)
            if on_trace:
                on_trace(job, trace)
    return traces


@pytest.fixture
def fake_runner(monkeypatch):
    calls = []

    def recording(jobs, *args, **kwargs):
        calls.append([(j.problem.name, len(j.workloads)) for j in jobs])
        return fake_run_jobs(jobs, *args, **kwargs)

    monkeypatch.setattr("solbench.orchestrator.scheduler.run_jobs", recording)
    return calls


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """tmp/problem_defs/axpy_fp32 (two workloads) and an empty tmp/solutions."""
    write_problem(tmp_path / "problem_defs")
    (tmp_path / "solutions").mkdir()
    return tmp_path


def solution(project: Path, name: str, *fake: str, body: str = "def run(x, y):\n    return x * 2.0 + y\n") -> Path:
    path = project / "solutions" / name
    marks = "".join(f"# fake: {m}\n" for m in fake)
    if name.endswith(".cu"):
        path.write_text(f"// solbench: problem=axpy_fp32\n{marks.replace('#', '//')}"
                        "torch::Tensor run(torch::Tensor x, torch::Tensor y) { return x * 2 + y; }\n")
    else:
        path.write_text(f"# solbench: problem=axpy_fp32\n{marks}{body}")
    return path
