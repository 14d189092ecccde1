"""The gate's run options come from the one table: `--solbench-hw` and the rest reach the run's config, with
the gate's own default (strict) and the workload limit read from the config alone."""

from __future__ import annotations

from tests.plugin.conftest import fake_run_jobs, run_pytest, solution


def recording_configs(monkeypatch) -> list:
    configs = []

    def recording(jobs, config, *args, **kwargs):
        configs.append((config, [len(j.workloads) for j in jobs]))
        return fake_run_jobs(jobs, config, *args, **kwargs)

    monkeypatch.setattr("solbench.orchestrator.scheduler.run_jobs", recording)
    return configs


def test_table_options_reach_the_run_config(project, monkeypatch, capsys):
    configs = recording_configs(monkeypatch)
    solution(project, "good.py")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu", "--solbench-hw", "H100",
                        "--solbench-trials", "2", "--solbench-no-adaptive", "--solbench-baseline-timing", "compile",
                        capsys=capsys)
    assert result.ret == 0, result.output
    config, _ = configs[-1]
    assert (config.hw, config.trials, config.adaptive, config.baseline_compile) == ("H100", 2, False, True)
    assert config.strict  # the gate's default


def test_strict_off_and_the_workload_limit(project, monkeypatch, capsys):
    configs = recording_configs(monkeypatch)
    solution(project, "good.py")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu", "--solbench-no-strict",
                        "--solbench-max-workloads", "1", capsys=capsys)
    assert result.ret == 0, result.output
    config, workloads = configs[-1]
    assert not config.strict and config.max_workloads == 1 and workloads == [1]
    assert len([n for n in result.outcomes if "axpy_fp32[" in n]) == 1


def test_an_unknown_hw_is_a_usage_error(project, monkeypatch, capsys):
    recording_configs(monkeypatch)
    solution(project, "good.py")
    result = run_pytest(project, "--solbench", "solutions", "--solbench-device", "cpu", "--solbench-hw", "NOPE",
                        capsys=capsys)
    assert result.ret == 4
