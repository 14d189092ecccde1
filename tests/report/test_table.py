"""The run's terminal tables show the numerics flags of passed workloads."""

from __future__ import annotations

from rich.console import Console

from solbench.report.table import summary_table, workload_table
from tests.report.conftest import make_trace


def rendered(table) -> str:
    console = Console(record=True, width=260, color_system=None)
    console.print(table)
    return console.export_text()


def test_workload_table_has_a_flags_column():
    text = rendered(workload_table([make_trace(uuid="w0", flags=["outliers", "systematic_bias"]),
                                    make_trace(uuid="w1")]))
    header = next(line for line in text.splitlines() if "status" in line)
    assert "flags" in header
    flagged = next(line for line in text.splitlines() if "outliers" in line)
    assert "systematic_bias" in flagged and "PASSED" in flagged


def test_summary_table_counts_flagged_workloads():
    text = rendered(summary_table([make_trace(uuid="w0", flags=["outliers"]), make_trace(uuid="w1"),
                                   make_trace(uuid="w2", status="INCORRECT_NUMERICAL", flags=["outliers"])]))
    header = next(line for line in text.splitlines() if "workloads" in line)
    cells = next(line for line in text.splitlines() if "rmsnorm" in line).split()
    columns = header.split()
    assert cells[columns.index("flagged")] == "1" and cells[columns.index("passed")] == "2"
