"""Timings as pytest-benchmark's JSON, written by pytest-benchmark's own code (`pytest-benchmark compare`
and its other tooling read them).

One benchmark per passed workload, named `solbench::PROBLEM::SOLUTION::WORKLOAD` so runs match up
across commits. Each is a `pytest_benchmark.stats.Metadata`, serialised by pytest-benchmark's
`as_dict` and its `pytest_benchmark_generate_json` hook, with its machine and commit information.
pytest-benchmark computes its statistics from every sample; a trace keeps summary statistics only, so
`TraceStats` hands it the trace's figures: the quartiles are median -/+ IQR/2 (exact when the
distribution is symmetric) and the outlier counts are unknown (reported as 0). Figures are in seconds,
as pytest-benchmark expects.

pytest-benchmark is optional (`solbench[test]`): it is imported when a file is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solbench import __version__
from solbench.report.merge import hardware_of
from solbench.spec.trace import LatencyStats, Status, Trace


@dataclass
class TraceBenchmark:
    """What `pytest_benchmark.stats.Metadata` reads from the benchmark fixture it is usually given."""

    name: str
    fullname: str
    group: str
    param: str
    params: dict
    extra_info: dict = field(default_factory=dict)
    cprofile_stats: Any = None
    has_error: bool = False


def trace_stats(latency: LatencyStats):
    """A `pytest_benchmark.stats.Stats` whose figures are the trace's (pytest-benchmark caches each figure
    in the instance, so setting them there is what its own code reads)."""
    from pytest_benchmark.stats import Stats  # optional dependency (see the module docstring)

    def sec(value_ms: float | None, default_ms: float) -> float:
        return (value_ms if value_ms is not None else default_ms) * 1e-3

    stats = Stats()
    median, iqr = sec(latency.median_ms, 0.0), sec(latency.iqr_ms, 0.0)
    mean = sec(latency.mean_ms, latency.median_ms)
    stats.__dict__.update(
        min=sec(latency.min_ms, latency.median_ms), max=sec(latency.max_ms, latency.median_ms), mean=mean,
        stddev=sec(latency.stdev_ms, 0.0), rounds=latency.n, median=median, iqr=iqr, q1=median - iqr / 2,
        q3=median + iqr / 2, ld15iqr=sec(latency.min_ms, latency.median_ms),
        hd15iqr=sec(latency.max_ms, latency.median_ms), total=mean * latency.n, outliers="0;0",
        ops=1 / mean if mean > 0 else 0.0)
    return stats


def benchmark_metadata(trace: Trace):
    """The pytest-benchmark record of one passed, timed workload (None when there is no timing)."""
    from pytest_benchmark.stats import Metadata  # optional dependency (see the module docstring)

    perf = trace.evaluation.performance
    if trace.status != Status.PASSED or perf is None or perf.latency is None or not perf.latency.median_ms:
        return None
    lat, sol = perf.latency, trace.evaluation.sol or {}
    extra = {"problem": trace.definition, "solution": trace.solution, "solution_hash": trace.solution_hash,
             "hardware": hardware_of(trace), "ci_low_ms": lat.ci_low_ms, "ci_high_ms": lat.ci_high_ms,
             "timing_method": lat.method, "reference_latency_ms": perf.reference_latency_ms,
             "speedup_factor": perf.speedup_factor, "sol_score": sol.get("score"), "t_sol_ms": sol.get("t_sol_ms"),
             "sol_hw": sol.get("hw")}
    fixture = TraceBenchmark(name=f"{trace.solution}[{trace.workload_uuid}]",
                             fullname=f"solbench::{trace.definition}::{trace.solution}::{trace.workload_uuid}",
                             group=trace.definition, param=trace.workload_uuid,
                             params=dict(trace.workload.axes), extra_info=extra)
    options = {"timer": lat.method or "solbench", "warmup": lat.warmup, "min_rounds": lat.n, "disable_gc": False,
               "max_time": None, "min_time": None}
    metadata = Metadata(fixture, iterations=1, options=options)
    metadata.stats = trace_stats(lat)
    return metadata


def benchmark_document(traces: list[Trace], commit_info: dict | None = None) -> dict:
    """The whole JSON document, from pytest-benchmark's own hook implementations."""
    from pytest_benchmark.plugin import (  # optional dependency (see the module docstring)
        pytest_benchmark_generate_json,
        pytest_benchmark_generate_machine_info,
    )

    machine = pytest_benchmark_generate_machine_info()
    machine["solbench"] = {"version": __version__, "hardware": sorted({hardware_of(t) for t in traces})}
    benchmarks = [m for m in map(benchmark_metadata, traces) if m is not None]
    return pytest_benchmark_generate_json(config=None, benchmarks=benchmarks, include_data=False,
                                          machine_info=machine, commit_info=commit_info or {})


def write_benchmark_json(traces: list[Trace], path: str | Path, commit_info: dict | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(benchmark_document(traces, commit_info), indent=1, allow_nan=False) + "\n")
    return path
