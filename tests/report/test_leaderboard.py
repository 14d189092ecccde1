"""Leaderboard columns and aggregation rules (documented in docs/leaderboard.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from solbench.report.leaderboard import COLUMN_NAMES, leaderboard, read_leaderboard, render
from solbench.report.merge import merge
from tests.report.conftest import make_trace, sample_traces, sol

REPO = Path(__file__).resolve().parents[2]
EXPECTED_COLUMNS = (
    "level", "solution", "solution_hash", "problem", "hardware", "device", "problems", "workloads", "passed",
    "failed", "skipped", "conflicts", "numerics_flagged", "pass_rate", "geomean_latency_ms", "latency_ci_low_ms", "latency_ci_high_ms",
    "geomean_reference_latency_ms", "geomean_t_sol_ms", "geomean_speedup_vs_reference",
    "geomean_speedup_vs_baseline", "mean_sol_score", "fast_1", "fast_2", "workloads_digest", "last_timestamp")


def row(frame, problem, solution="fast"):
    rows = frame[(frame["problem"] == problem) & (frame["solution"] == solution)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_columns_are_stable_and_documented():
    assert COLUMN_NAMES == EXPECTED_COLUMNS
    assert tuple(leaderboard(sample_traces()).columns) == EXPECTED_COLUMNS
    doc = (REPO / "docs" / "leaderboard.md").read_text()
    assert all(f"`{c}`" in doc for c in EXPECTED_COLUMNS)


def test_problem_row_aggregates():
    traces = [
        make_trace(uuid="w0", latency_ms=1.0, reference_ms=2.0, rel_ci=0.1, sol=sol(0.5, 1.0, t_baseline_ms=4.0)),
        make_trace(uuid="w1", latency_ms=4.0, reference_ms=4.0, rel_ci=0.1, sol=sol(1.0, 4.0, t_baseline_ms=8.0)),
        make_trace(uuid="w2", status="INCORRECT_NUMERICAL"),
        make_trace(uuid="w3", status="SKIPPED"),
    ]
    r = row(leaderboard(traces), "rmsnorm")
    assert (r["workloads"], r["passed"], r["failed"], r["skipped"]) == (4, 2, 1, 1)
    assert r["pass_rate"] == pytest.approx(2 / 3)  # skipped is not in the denominator
    assert r["geomean_latency_ms"] == pytest.approx(2.0)
    assert r["latency_ci_low_ms"] == pytest.approx(1.8) and r["latency_ci_high_ms"] == pytest.approx(2.2)
    assert r["geomean_speedup_vs_reference"] == pytest.approx(math.sqrt(2.0 * 1.0))
    assert r["geomean_speedup_vs_baseline"] == pytest.approx(math.sqrt(4.0 * 2.0))
    scores = [sol(0.5, 1.0, 4.0)["score"], sol(1.0, 4.0, 8.0)["score"], 0.0]  # the failure scores 0
    assert r["mean_sol_score"] == pytest.approx(sum(scores) / 3)
    assert r["fast_1"] == pytest.approx(1 / 3)  # speedup exactly 1 is not faster
    assert r["fast_2"] == pytest.approx(0.0)  # speedup exactly 2 is not > 2


def test_numerics_flagged_counts_passed_workloads_with_flags():
    traces = [make_trace(uuid="w0", flags=["systematic_bias"]), make_trace(uuid="w1"),
              make_trace(uuid="w2", flags=["outliers", "concentrated_mismatches"]),
              make_trace(uuid="w3", status="INCORRECT_NUMERICAL", flags=["outliers"]),  # failed: counted as failed
              make_trace("gemm", uuid="g0", flags=["outliers"])]
    frame = leaderboard(traces)
    assert row(frame, "rmsnorm")["numerics_flagged"] == 2 and row(frame, "rmsnorm")["passed"] == 3
    summary = frame[frame["level"] == "solution"].iloc[0]
    assert summary["numerics_flagged"] == 3
    back = leaderboard([make_trace(uuid="old")])  # traces from before the flags read as unflagged
    assert row(back, "rmsnorm")["numerics_flagged"] == 0


def test_missing_figures_are_nan_not_zero():
    traces = [make_trace(uuid="w0", sol=None, rel_ci=None, reference_ms=None), make_trace(uuid="w1", sol=sol(1, 2), reference_ms=None)]
    r = row(leaderboard(traces), "rmsnorm")
    assert math.isnan(r["mean_sol_score"])  # one passed workload has no score
    assert math.isnan(r["latency_ci_high_ms"])  # one passed workload has no interval
    assert math.isnan(r["geomean_speedup_vs_reference"]) and math.isnan(r["geomean_reference_latency_ms"])
    only_skipped = leaderboard([make_trace(status="SKIPPED")])
    assert math.isnan(row(only_skipped, "rmsnorm")["pass_rate"])


def test_summary_rows_weigh_problems_equally():
    traces = [make_trace("p1", uuid=f"a{i}", latency_ms=1.0, reference_ms=4.0) for i in range(9)]
    traces += [make_trace("p2", uuid="b0", latency_ms=1.0, reference_ms=1.0)]
    frame = leaderboard(traces)
    summary = frame[frame["level"] == "solution"].iloc[0]
    assert summary["problem"] == "*" and summary["problems"] == 2 and summary["workloads"] == 10
    assert summary["geomean_speedup_vs_reference"] == pytest.approx(2.0)  # sqrt(4 * 1), not 4**0.9
    assert summary["fast_1"] == pytest.approx(0.5)
    assert math.isnan(summary["geomean_latency_ms"])


def test_rows_per_hardware_and_conflicts_counted():
    traces = [make_trace(uuid="w0"), make_trace(uuid="w0", hardware="NVIDIA H200"),
              make_trace(uuid="w1"), make_trace(uuid="w1", status="TIMEOUT", timestamp="2026-03-01")]
    frame = leaderboard(merge(traces))
    problem_rows = frame[frame["level"] == "problem"]
    assert sorted(problem_rows["hardware"]) == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    h100 = problem_rows[problem_rows["hardware"] == "NVIDIA H100 80GB HBM3"].iloc[0]
    assert (h100["workloads"], h100["conflicts"]) == (1, 1)


def test_formats_round_trip(tmp_path):
    frame = leaderboard(sample_traces())
    path = tmp_path / "lb.csv"
    path.write_text(render(frame, "csv"))
    back = read_leaderboard(path)
    assert list(back.columns) == list(EXPECTED_COLUMNS) and len(back) == len(frame)
    assert back["geomean_latency_ms"].iloc[0] == pytest.approx(frame["geomean_latency_ms"].iloc[0], rel=1e-5)
    md = render(frame, "md").splitlines()
    assert md[0].startswith("| level | solution") and len(md) == len(frame) + 2 and "n/a" in md[-1]
    data = json.loads(render(frame, "json"))
    assert data["columns"] == list(EXPECTED_COLUMNS) and data["rows"][-1]["geomean_latency_ms"] is None
