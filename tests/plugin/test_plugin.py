"""The pytest plugin: collection, pass/fail/skip, GPU requirement, score and regression gates, outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from solbench.cli import main as solbench_main
from tests.child_env import repo_env
from tests.plugin.conftest import run_pytest, solution

REPO = Path(__file__).resolve().parents[2]
W0, W1 = "axpy_fp32[n=64]", "axpy_fp32[n=96]"


def test_inert_without_the_flag(project, fake_runner, capsys):
    solution(project, "good.py")
    (project / "test_plain.py").write_text("def test_ok():\n    pass\n")
    result = run_pytest(project, capsys=capsys)
    assert result.ret == 0 and list(result.outcomes) == ["test_plain.py::test_ok"]
    # Installed, the plugin is listed in pytest's header ("plugins: ..., solbench-0.1.0"); nothing else.
    body = "\n".join(line for line in result.output.splitlines() if not line.startswith("plugins:"))
    assert "solbench" not in body and fake_runner == []


def test_collects_one_item_per_solution_and_workload(project, fake_runner, capsys):
    solution(project, "good.py")
    solution(project, "kernel.cu")
    (project / "solutions" / "helper.py").write_text("def helper():\n    return 1\n")
    (project / "solutions" / "_private.py").write_text("# solbench: problem=axpy_fp32\ndef run(x, y):\n    pass\n")
    packaged = project / "solutions" / "packaged"
    packaged.mkdir()
    (packaged / "impl.py").write_text("def run(x, y):\n    return x * 2.0 + y\n")
    (packaged / "axpy.json").write_text(json.dumps({
        "name": "packaged_axpy", "definition": "axpy_fp32", "author": "t", "sources": [{"path": "impl.py"}],
        "spec": {"languages": ["pytorch"], "entry_point": "impl.py::run", "destination_passing_style": False}}))
    result = run_pytest(project, "--solbench", "solutions", "--collect-only", "-q", capsys=capsys)
    assert result.ret == 0
    ids = sorted(line for line in result.output.splitlines() if "::" in line)
    assert ids == sorted(f"solutions/{f}::{w}" for f in ("good.py", "kernel.cu", "packaged/axpy.json")
                         for w in (W0, W1))
    assert fake_runner == []  # collecting evaluates nothing


def test_a_solution_named_on_the_command_line_is_not_imported_as_a_test_module(project, fake_runner, capsys):
    # `--solbench reference_impls/core/x.baseline.py`: pytest collects files named explicitly as test
    # modules whatever their name, and "x.baseline" is no module name (this broke the GPU gate).
    solution(project, "axpy.baseline.py")
    result = run_pytest(project, "--solbench", "solutions/axpy.baseline.py", "--collect-only", "-q", capsys=capsys)
    assert result.ret == 0, result.output
    ids = sorted(line for line in result.output.splitlines() if "::" in line)
    assert ids == [f"solutions/axpy.baseline.py::{w}" for w in (W0, W1)]


def test_cuda_graphs_option_reaches_the_run_config(project, monkeypatch, capsys):
    from tests.plugin.conftest import fake_run_jobs

    configs = []

    def recording(jobs, config, *args, **kwargs):
        configs.append(config)
        return fake_run_jobs(jobs, config, *args, **kwargs)

    monkeypatch.setattr("solbench.orchestrator.scheduler.run_jobs", recording)
    solution(project, "good.py")
    for extra, expected in (([], True), (["--solbench-no-cuda-graphs"], False)):
        result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu", *extra, capsys=capsys)
        assert result.ret == 0 and configs[-1].cuda_graphs is expected


def test_pass_fail_skip_and_the_failure_message(project, fake_runner, capsys):
    solution(project, "good.py")
    solution(project, "wrong.py", "status=INCORRECT_NUMERICAL", "log=max_abs_error_0.5_exceeds_atol")
    solution(project, "kernel.cu")
    out = project / "out"
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu",
                        "--solbench-traces", str(out / "t.jsonl"), "--solbench-benchmark-json", str(out / "b.json"),
                        capsys=capsys)
    assert result.ret == 1
    assert len(fake_runner) == 1 and sorted(fake_runner[0]) == [("axpy_fp32", 2)] * 3  # one scheduler call
    outcome = {k.split("/")[1]: v for k, v in result.outcomes.items()}
    assert outcome == {f"good.py::{W0}": "passed", f"good.py::{W1}": "passed",
                       f"wrong.py::{W0}": "failed", f"wrong.py::{W1}": "failed",
                       f"kernel.cu::{W0}": "skipped", f"kernel.cu::{W1}": "skipped"}
    message = result.messages[f"solutions/wrong.py::{W1}"]
    assert "INCORRECT_NUMERICAL: wrong on axpy_fp32, workload w1-96" in message
    assert "axes: n=96" in message and "max abs error 0.5 exceeds atol" in message and "Traceback" not in message
    assert "need a CUDA GPU" in result.messages[f"solutions/kernel.cu::{W0}"]
    assert len((out / "t.jsonl").read_text().splitlines()) == 6
    bench = json.loads((out / "b.json").read_text())
    assert sorted(b["name"] for b in bench["benchmarks"]) == ["good[w0-64]", "good[w1-96]"]
    assert "solbench: 6 workload(s) evaluated" in result.output


def test_deselected_items_are_not_evaluated(project, fake_runner):
    solution(project, "good.py")
    solution(project, "other.py")
    result = run_pytest(project, "--solbench", "solutions", "-k", "good and 64")
    assert result.ret == 0 and list(result.outcomes) == [f"solutions/good.py::{W0}"]
    assert fake_runner == [[("axpy_fp32", 1)]]


def test_require_gpu(project, fake_runner, monkeypatch):
    solution(project, "good.py")
    solution(project, "kernel.cu")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-require-gpu", "--solbench-device", "cpu")
    assert result.ret == 1 and set(result.outcomes.values()) == {"failed"} and fake_runner == []
    assert "no CUDA GPU is visible" in result.messages[f"solutions/good.py::{W0}"]
    monkeypatch.setattr("solbench.orchestrator.config.choose_devices", lambda config, arg: ["cuda:0"])
    result = run_pytest(project, "--solbench", "solutions", "--solbench-require-gpu")
    assert result.ret == 0 and set(result.outcomes.values()) == {"passed"}


def test_skipped_fails_when_a_gpu_is_required(project, fake_runner, monkeypatch):
    solution(project, "kernel.cu", "status=SKIPPED", "log=needs_sm90")
    monkeypatch.setattr("solbench.orchestrator.config.choose_devices", lambda config, arg: ["cuda:0"])
    result = run_pytest(project, "--solbench", "solutions", "--solbench-require-gpu")
    assert result.ret == 1 and "SKIPPED although --solbench-require-gpu" in result.messages[f"solutions/kernel.cu::{W0}"]


def test_min_score(project, fake_runner):
    solution(project, "good.py", "score=0.8")
    solution(project, "meh.py", "score=0.3")
    solution(project, "unscored.py")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-min-score", "0.5")
    outcome = {k.split("/")[1].split("::")[0]: v for k, v in result.outcomes.items()}
    assert outcome == {"good.py": "passed", "meh.py": "failed", "unscored.py": "failed"}
    assert "SOL score 0.300 < 0.5" in result.messages[f"solutions/meh.py::{W0}"]
    assert "no SOL score in the trace (n/a)" in result.messages[f"solutions/unscored.py::{W0}"]


def test_regression_gate_against_a_leaderboard(project, fake_runner, capsys):
    fast = solution(project, "kern.py", "latency_ms=1.0")
    solution(project, "steady.py", "latency_ms=1.0")
    traces = project / "base.jsonl"
    assert run_pytest(project, "--solbench", "solutions", "--solbench-traces", str(traces)).ret == 0
    baseline = project / "leaderboard.csv"
    assert solbench_main(["leaderboard", str(traces), "-o", str(baseline)]) == 0
    capsys.readouterr()

    fast.write_text(fast.read_text().replace("latency_ms=1.0", "latency_ms=1.5"))  # the "slowed" kernel
    solution(project, "newcomer.py")  # no recorded result: the gate skips it
    result = run_pytest(project, "--solbench", "solutions", "--solbench-baseline", str(baseline),
                        "--solbench-max-regression", "10%", capsys=capsys)
    assert result.ret == 1
    gate = {k.split("/")[1]: v for k, v in result.outcomes.items() if "regression" in k}
    assert gate == {"kern.py::regression[axpy_fp32]": "failed", "steady.py::regression[axpy_fp32]": "passed",
                    "newcomer.py::regression[axpy_fp32]": "skipped"}
    assert "REGRESSION" in result.messages["solutions/kern.py::regression[axpy_fp32]"]
    assert "+50.0%" in result.messages["solutions/kern.py::regression[axpy_fp32]"]
    assert "max regression 10.0%" in result.output
    # a wider tolerance lets the same slowdown through
    result = run_pytest(project, "--solbench", "solutions", "--solbench-baseline", str(baseline),
                        "--solbench-max-regression", "0.6")
    assert result.outcomes["solutions/kern.py::regression[axpy_fp32]"] == "passed"
    recorded = pd.read_csv(baseline)
    assert recorded[recorded["level"] == "problem"]["latency_ci_high_ms"].notna().all()  # the gate's noise figures


def test_bad_options_are_usage_errors(project, fake_runner):
    solution(project, "good.py")
    assert run_pytest(project, "--solbench", "solutions", "--solbench-problems", "nope").ret == 4
    assert run_pytest(project, "--solbench", "solutions", "--solbench-baseline", "missing.csv").ret == 4
    (project / "lb.csv").write_text("a,b\n1,2\n")
    assert run_pytest(project, "--solbench", "solutions", "--solbench-baseline", "lb.csv").ret == 4
    assert run_pytest(project, "--solbench", "solutions", "--solbench-min-score", "3").ret == 4


def test_unloadable_solution_fails_one_item(project, fake_runner):
    solution(project, "good.py")
    (project / "solutions" / "orphan.py").write_text("# solbench: problem=nonexistent\ndef run(x, y):\n    pass\n")
    result = run_pytest(project, "--solbench", "solutions")
    assert result.outcomes["solutions/orphan.py::load"] == "failed"
    assert "not under" in result.messages["solutions/orphan.py::load"]
    assert result.outcomes[f"solutions/good.py::{W0}"] == "passed"


def test_registered_through_the_pytest11_entry_point(project, tmp_path):
    """The entry-point lines for pyproject.toml, installed as a dist-info: `pytest --solbench` needs no -p."""
    site = tmp_path / "site"
    dist = site / "solbench_plugin_probe-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: solbench-plugin-probe\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nsolbench.pytest_plugin = solbench.pytest_plugin\n")
    env = repo_env(REPO)
    env["PYTHONPATH"] = str(site) + os.pathsep + env["PYTHONPATH"]
    solution(project, "good.py")
    for extra in ([], ["-p", "solbench.pytest_plugin"]):  # also loaded twice (entry point and -p): no error
        result = subprocess.run([sys.executable, "-m", "pytest", "--solbench", "solutions", "--collect-only", "-q",
                                 "-p", "no:cacheprovider", *extra], cwd=project, env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"solutions/good.py::{W0}" in result.stdout


def test_items_report_as_their_workloads_finish(project, monkeypatch):
    """The second workload is only evaluated once the first item has reported: a plugin that evaluates
    everything inside the first item never gets there (the stand-in gives up and says so)."""
    import threading

    from tests.plugin.conftest import Recorder, fake_run_jobs

    first_reported = threading.Event()
    waited: list[bool] = []

    def gated(jobs, config, devices, *, on_trace=None, stop=None, **kwargs):
        def on_trace_gated(job, trace):
            on_trace(job, trace)
            if not waited:
                waited.append(first_reported.wait(timeout=60))

        return fake_run_jobs(jobs, config, devices, on_trace=on_trace_gated, stop=stop, **kwargs)

    original = Recorder.pytest_runtest_logreport

    def logreport(self, report):
        original(self, report)
        if report.when == "call":
            first_reported.set()

    monkeypatch.setattr(Recorder, "pytest_runtest_logreport", logreport)
    monkeypatch.setattr("solbench.orchestrator.scheduler.run_jobs", gated)
    solution(project, "good.py")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu")
    assert waited == [True], "the first item did not report before the rest was evaluated"
    assert result.ret == 0 and set(result.outcomes.values()) == {"passed"} and len(result.outcomes) == 2


def test_progress_line_and_results_in_a_summary_section(project, fake_runner, capsys):
    solution(project, "good.py", "score=0.8")
    solution(project, "kernel.cu")
    solution(project, "wrong.py", "status=RUNTIME_ERROR", "log=the_solution_raised:_ValueError:_boom")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu", capsys=capsys)
    assert result.ret == 1
    out = result.output
    assert "solbench: 6 workload(s) of 3 solution file(s) on cpu; each item reports when its workload finishes" in out
    section = out[out.index("= solbench ="):]  # pytest's terminal-summary section, after the items' summary
    assert "Results" in section and "Summary" in section and "solbench: 6 workload(s) evaluated" in section
    assert "RUNTIME_ERROR wrong on axpy_fp32 (2 workloads): the solution raised: ValueError: boom" in section
    assert "SKIPPED kernel on axpy_fp32 (2 workloads): CUDA C++ solutions need a CUDA GPU" in section
    # a section of pytest's terminal summary, as pytest-benchmark's table is: after the items' progress
    # output and their failures, before the short summary
    assert out.index("= FAILURES =") < out.index("= solbench =") < out.index("short test summary info")


def test_a_cuda_device_asked_for_without_a_gpu_is_a_usage_error(project, fake_runner, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    solution(project, "good.py")
    for device in ("cuda", "cuda:0"):
        capsys.readouterr()
        result = run_pytest(project, "--solbench", "solutions", "--solbench-device", device)
        assert result.ret == 4 and fake_runner == [], device
        err = capsys.readouterr().err
        assert f"device {device!r} was asked for, but no CUDA GPU is visible" in err, err
    assert run_pytest(project, "--solbench", "solutions", "--solbench-device", "auto").ret == 0


def test_items_are_named_by_axes_and_lines_show_the_workload_judged(project, fake_runner, capsys):
    """Items read `axpy_fp32[n=64]`, `-k` picks them by those words, each gets a line (written when its
    workload starts being judged), a SKIPPED line points at the solution file, and pytest-benchmark's
    banner is left out unless its JSON is asked for."""
    pytest.importorskip("pytest_benchmark")
    solution(project, "good.py")
    solution(project, "kernel.cu")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu", "-k", "96", capsys=capsys)
    assert result.ret == 0 and sorted(result.outcomes) == [f"solutions/good.py::{W1}", f"solutions/kernel.cu::{W1}"]
    out = result.output
    assert f"solutions/good.py::{W1} PASSED" in out  # one line per item, not a dot
    assert f"SKIPPED [1] solutions/kernel.cu:1: {W1}: CUDA C++ solutions need a CUDA GPU" in out
    assert "gate/items.py" not in out
    assert "benchmark:" not in out
    bench = project / "b.json"
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu", "-k", "good and 96",
                        "--solbench-benchmark-json", str(bench), capsys=capsys)
    assert result.ret == 0 and "benchmark:" in result.output


def test_workloads_sharing_their_axes_keep_their_uuid():
    from solbench.gate.items import workload_labels
    from solbench.spec.workload import Workload

    def workload(uuid: str, axes: dict) -> Workload:
        return Workload.from_dict({"uuid": uuid, "axes": axes, "inputs": {}})

    labels = workload_labels([workload("a1", {"m": 1, "k": 2}), workload("b2", {"m": 1, "k": 2}),
                              workload("c3", {}), workload("d4", {"m": 4, "k": 2})])
    assert labels == ["m=1-k=2-a1", "m=1-k=2-b2", "c3", "m=4-k=2"]


def test_an_older_leaderboard_format_is_named_in_the_header(project, fake_runner, capsys):
    """A baseline CSV written before a column existed (the shipped one lacked numerics_flagged) still gates,
    and the session's header says it should be regenerated; a current one gets no such line."""
    solution(project, "kern.py")
    traces = project / "base.jsonl"
    assert run_pytest(project, "--solbench", "solutions", "--solbench-traces", str(traces)).ret == 0
    baseline = project / "leaderboard.csv"
    assert solbench_main(["leaderboard", str(traces), "-o", str(baseline)]) == 0
    capsys.readouterr()
    result = run_pytest(project, "--solbench", "solutions", "--solbench-baseline", str(baseline), capsys=capsys)
    assert result.ret == 0 and "older leaderboard format" not in result.output
    pd.read_csv(baseline).drop(columns=["numerics_flagged"]).to_csv(baseline, index=False)
    result = run_pytest(project, "--solbench", "solutions", "--solbench-baseline", str(baseline), capsys=capsys)
    assert result.ret == 0
    assert f"{baseline} is an older leaderboard format (no numerics_flagged column)" in result.output


def test_a_broken_problem_fails_only_its_own_solutions(project, fake_runner):
    from tests.runner.conftest import write_problem

    broken = write_problem(project / "problem_defs", name="axpy_broken") / "definition.json"
    broken.write_text(broken.read_text()[:-5])  # cut short: not valid JSON
    solution(project, "good.py")
    (project / "solutions" / "other.py").write_text("# solbench: problem=axpy_broken\ndef run(x, y):\n    return x\n")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu")
    assert result.ret == 1
    assert result.outcomes == {f"solutions/good.py::{W0}": "passed", f"solutions/good.py::{W1}": "passed",
                               "solutions/other.py::load": "failed"}
    assert "problem 'axpy_broken' could not be loaded" in result.messages["solutions/other.py::load"]
    assert "not valid JSON at line" in result.messages["solutions/other.py::load"]
