"""Timings in pytest-benchmark's JSON layout, so `pytest-benchmark compare` and its tooling read them.

One benchmark per passed workload, named `solbench::PROBLEM::SOLUTION::WORKLOAD` so runs match up
across commits. pytest-benchmark keeps every sample; a trace keeps summary statistics only, so the
quartiles are median -/+ IQR/2 (exact when the distribution is symmetric) and the outlier counts are
unknown (reported as 0). Figures are in seconds, as pytest-benchmark expects.
"""

from __future__ import annotations

import json
import platform
import socket
from datetime import UTC, datetime
from pathlib import Path

from solbench import __version__
from solbench.report.merge import hardware_of
from solbench.spec.trace import Status, Trace

FORMAT_VERSION = "5.0.0"  # the pytest-benchmark JSON layout this mimics


def benchmark_entry(trace: Trace) -> dict | None:
    """The pytest-benchmark record of one passed, timed workload (None when there is no timing)."""
    perf = trace.evaluation.performance
    if trace.status != Status.PASSED or perf is None or perf.latency is None:
        return None
    lat = perf.latency
    if not lat.median_ms:
        return None

    def sec(value_ms: float | None, default_ms: float = 0.0) -> float:
        return (value_ms if value_ms is not None else default_ms) * 1e-3

    iqr, median = sec(lat.iqr_ms), sec(lat.median_ms)
    mean = sec(lat.mean_ms, lat.median_ms)
    axes = dict(trace.workload.get("axes", {}))
    stats = {"min": sec(lat.min_ms, lat.median_ms), "max": sec(lat.max_ms, lat.median_ms), "mean": mean,
             "stddev": sec(lat.stdev_ms),
             "rounds": lat.n, "median": median, "iqr": iqr, "q1": median - iqr / 2, "q3": median + iqr / 2,
             "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0", "ld15iqr": sec(lat.min_ms, lat.median_ms),
             "hd15iqr": sec(lat.max_ms, lat.median_ms), "ops": 1 / mean if mean > 0 else 0.0, "total": mean * lat.n,
             "iterations": 1}
    sol = trace.evaluation.sol or {}
    return {
        "group": trace.definition,
        "name": f"{trace.solution}[{trace.workload_uuid}]",
        "fullname": f"solbench::{trace.definition}::{trace.solution}::{trace.workload_uuid}",
        "params": axes, "param": trace.workload_uuid,
        "extra_info": {"problem": trace.definition, "solution": trace.solution,
                       "solution_hash": trace.solution_hash, "hardware": hardware_of(trace),
                       "ci_low_ms": lat.ci_low_ms, "ci_high_ms": lat.ci_high_ms, "timing_method": lat.method,
                       "reference_latency_ms": perf.reference_latency_ms, "speedup_factor": perf.speedup_factor,
                       "sol_score": sol.get("score"), "t_sol_ms": sol.get("t_sol_ms")},
        "options": {"timer": lat.method or "solbench", "warmup": lat.warmup, "min_rounds": lat.n,
                    "disable_gc": False, "max_time": None, "min_time": None},
        "stats": stats,
    }


def benchmark_document(traces: list[Trace]) -> dict:
    hardware = sorted({hardware_of(t) for t in traces}) or ["unknown"]
    return {
        "machine_info": {"node": socket.gethostname(), "processor": ", ".join(hardware),
                         "machine": platform.machine(), "python_implementation": platform.python_implementation(),
                         "python_version": platform.python_version(), "system": platform.system(),
                         "release": platform.release(), "cpu": {}, "solbench": __version__},
        "commit_info": {},
        "benchmarks": [e for e in map(benchmark_entry, traces) if e is not None],
        "datetime": datetime.now(UTC).isoformat(),
        "version": FORMAT_VERSION,
    }


def write_benchmark_json(traces: list[Trace], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(benchmark_document(traces), indent=1, allow_nan=False) + "\n")
    return path
