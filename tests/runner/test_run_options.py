"""`--lock-clocks` (against a fake NVML, the only boundary we must not touch for real), published
baselines from a CSV, and the optimised baselines shipped with problems."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from solbench.timing.clock_lock import ClockLock, ClockLockError, lock_device_clocks
from solbench.timing.nvml import NvmlError
from tests.runner.conftest import write_problem
from tests.test_cli import FAST, solbench
from tests.timing.fake_nvml import FakeGpu, FakeNvml


def fake_lock(fake: FakeNvml):
    return lambda index: ClockLock(index, nvml=fake, sleep=lambda s: None, settle_s=0.0)


def test_every_cuda_device_is_locked_for_the_run_and_restored_after():
    fake = FakeNvml([FakeGpu(bus_id="00000000:65:00.0"), FakeGpu(bus_id="00000000:66:00.0",
                                                                   uuid="GPU-1")])
    stack = lock_device_clocks(["cuda:0", "cuda:1", "cpu"], make_lock=fake_lock(fake))
    assert fake.names_called().count("set_gpu_locked_clocks") == 2
    assert "reset_gpu_locked_clocks" not in fake.names_called()
    stack.close()
    assert fake.names_called().count("reset_gpu_locked_clocks") == 2


def test_a_lock_that_fails_restores_the_devices_already_locked():
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-1", bus_id="00000000:66:00.0")])
    calls = {"n": 0}
    real = fake.set_gpu_locked_clocks

    def second_fails(handle, lo, hi):
        calls["n"] += 1
        if calls["n"] == 2:
            raise NvmlError("NO_PERMISSION", "Insufficient Permissions")
        return real(handle, lo, hi)

    fake.set_gpu_locked_clocks = second_fails
    with pytest.raises(ClockLockError):
        lock_device_clocks(["cuda:0", "cuda:1"], make_lock=fake_lock(fake))
    assert "reset_gpu_locked_clocks" in fake.names_called()


def test_lock_clocks_without_a_gpu_is_bad_input(tmp_path):
    problem = write_problem(tmp_path)
    result = solbench("run", str(problem), "--lock-clocks", *FAST)
    assert result.returncode == 2 and "--lock-clocks needs a CUDA GPU" in result.stderr


def test_published_baseline_is_used_when_faster_than_the_measured_reference(tmp_path):
    problem = write_problem(tmp_path)
    csv = tmp_path / "baselines.csv"
    csv.write_text("category,workload_uuid,baseline_ms\nL1,w0-64,0.000001\n")
    result = solbench("run", str(problem), "--json", "--hw", "H100", "--baseline-csv", str(csv), *FAST)
    assert result.returncode == 0, result.stderr
    traces = {t["workload"]["uuid"]: t["evaluation"] for t in map(json.loads, result.stdout.splitlines())}
    assert traces["w0-64"]["sol"]["t_baseline_ms"] == pytest.approx(0.000001)
    other = traces["w1-96"]
    assert other["sol"]["t_baseline_ms"] == pytest.approx(other["performance"]["reference_latency_ms"])


def test_malformed_baseline_csv_is_bad_input(tmp_path):
    problem = write_problem(tmp_path)
    csv = tmp_path / "b.csv"
    csv.write_text("uuid,ms\nw0-64,1\n")
    result = solbench("run", str(problem), "--baseline-csv", str(csv), *FAST)
    assert result.returncode == 2 and "workload_uuid and baseline_ms" in result.stderr


def test_compile_baseline_is_timed_and_the_fastest_baseline_anchors_the_score(tmp_path):
    problem = write_problem(tmp_path, sizes=(64,))
    result = solbench("run", str(problem), "--json", "--hw", "H100", "--baseline", "compile", *FAST)
    assert result.returncode == 0, result.stderr
    sol = json.loads(result.stdout.splitlines()[0])["evaluation"]["sol"]
    baselines = sol["baselines_ms"]
    assert baselines["compile"] > 0 and baselines["eager"] > 0
    assert sol["t_baseline_ms"] == pytest.approx(min(baselines["compile"], baselines["eager"]))


def test_fresh_inputs_can_be_turned_off_and_the_trace_says_so(tmp_path):
    problem = write_problem(tmp_path, sizes=(64,))
    flags = {}
    for budget in ("3", "0"):
        result = solbench("run", str(problem), "--json", "--fresh-inputs-budget", budget, *FAST)
        assert result.returncode == 0, result.stderr
        flags[budget] = json.loads(result.stdout.splitlines()[0])["evaluation"]["performance"]["latency"]["flags"]
    assert "timed_inputs_fixed" in flags["0"] and "timed_inputs_fixed" not in flags["3"]


def test_shipped_baselines_are_checked_then_timed_and_anchor_the_score(tmp_path):
    """One run over three problems: a correct baseline.py in the problem folder (timed, recorded
    under "shipped"), a wrong one (refused, said in the warnings), and the core LayerNorm's Triton
    baseline (in the interpreter on CPU), found beside problem_defs/ in reference_impls/."""
    dataset = tmp_path / "problem_defs"
    good = write_problem(dataset / "toy", sizes=(64,), name="axpy_good")
    (good / "baseline.py").write_text("import torch\n\ndef run(x, y):\n    return torch.add(y, x, alpha=2.0)\n")
    bad = write_problem(dataset / "toy", sizes=(64,), name="axpy_bad")
    (bad / "baseline.py").write_text("def run(x, y):\n    return x * 3.0 + y\n")
    core = Path(__file__).resolve().parents[2]
    layernorm = dataset / "core" / "layernorm_fp32_h1024"
    shutil.copytree(core / "problem_defs" / "core" / "layernorm_fp32_h1024", layernorm)
    shipped = tmp_path / "reference_impls" / "core" / "layernorm_fp32_h1024.baseline.py"
    shipped.parent.mkdir(parents=True)
    shutil.copy(core / "reference_impls" / "core" / "layernorm_fp32_h1024.baseline.py", shipped)
    result = solbench("run", str(dataset), "--json", "--hw", "H100", "--max-workloads", "1", *FAST)
    assert result.returncode == 0, result.stderr
    traces = {t["definition"]: t["evaluation"] for t in map(json.loads, result.stdout.splitlines())}
    for name in ("axpy_good", "layernorm_fp32_h1024"):
        sol = traces[name]["sol"]
        assert sol["baselines_ms"]["shipped"] > 0 and sol["baselines_ms"]["eager"] > 0
        assert sol["t_baseline_ms"] == pytest.approx(min(sol["baselines_ms"]["shipped"], sol["baselines_ms"]["eager"]))
    refused = traces["axpy_bad"]
    assert refused["status"] == "PASSED" and refused["sol"]["baselines_ms"]["shipped"] is None
    assert any("shipped baseline unavailable" in w and "disagrees" in w for w in refused["warnings"])
