"""Timings in pytest-benchmark's JSON layout: `pytest-benchmark compare` reads them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from solbench.report.benchmark_json import benchmark_document, write_benchmark_json
from tests.report.conftest import make_trace


def test_one_entry_per_timed_workload_in_seconds():
    doc = benchmark_document([make_trace(uuid="w0", latency_ms=2.0), make_trace(uuid="w1", status="TIMEOUT")])
    (entry,) = doc["benchmarks"]
    assert entry["fullname"] == "solbench::rmsnorm::fast::w0" and entry["group"] == "rmsnorm"
    assert entry["stats"]["median"] == pytest.approx(2e-3) and entry["stats"]["rounds"] == 50
    assert entry["extra_info"]["ci_high_ms"] == pytest.approx(2.04)
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(doc)


def test_pytest_benchmark_compare_reads_them(tmp_path):
    pytest.importorskip("pytest_benchmark")
    a = write_benchmark_json([make_trace(uuid="w0", latency_ms=1.0)], tmp_path / "0001_a.json")
    b = write_benchmark_json([make_trace(uuid="w0", latency_ms=1.5)], tmp_path / "0002_b.json")
    result = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(a), str(b),
                             "--columns", "min,median,max"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("fast[w0]") == 2
    assert "1,500.0000 (1.50)" in result.stdout  # median 1.5 ms shown in us, ratio to the first run


def test_written_by_pytest_benchmarks_own_code(tmp_path):
    """The document comes from pytest-benchmark's Metadata and JSON hook, not a copy of its layout."""
    pytest_benchmark = pytest.importorskip("pytest_benchmark")
    from pytest_benchmark.stats import Metadata

    from solbench.report.benchmark_json import benchmark_metadata

    trace = make_trace(uuid="w0", latency_ms=2.0, axes={"n": 64})
    assert isinstance(benchmark_metadata(trace), Metadata)
    doc = json.loads(write_benchmark_json([trace], tmp_path / "b.json").read_text())
    assert doc["version"] == pytest_benchmark.__version__
    assert {"python_compiler", "python_build", "cpu"} <= set(doc["machine_info"])  # its machine info
    (entry,) = doc["benchmarks"]
    assert entry["params"] == {"n": 64} and entry["stats"]["iterations"] == 1
    assert entry["stats"]["q1"] == pytest.approx(2e-3 - 0.04e-3) and entry["stats"]["outliers"] == "0;0"
