"""`sol`, `hw list`, `run` and `leaderboard` at 80, 120 and 160 columns, piped and on a terminal: a figure or an axis
value is never cut short (rich marks a squeezed cell with `…`); columns are dropped instead, and said so."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from solbench.cli import main
from solbench.report.table import PIPED_WIDTH, piped_width, print_results
from tests.report.test_table import cpu_run_traces

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "problem_defs" / "core" / "layernorm_fp32_h1024"
NUMBER_OR_AXIS = re.compile(r"(\d|=)…")


@pytest.fixture(params=["piped", "tty"])
def stdout_kind(request, monkeypatch):
    if request.param == "tty":
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    return request.param


@pytest.mark.parametrize("width", [80, 120, 160])
@pytest.mark.parametrize("command", [["hw", "list"], ["sol", str(PROBLEM), "--hw", "B200"]])
def test_no_number_or_axis_is_cut(command, width, stdout_kind, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(command) == 0
    out = capsys.readouterr().out
    assert not NUMBER_OR_AXIS.search(out), out
    assert max(len(line) for line in out.splitlines()) <= width
    if command[0] == "hw":
        assert "1811.3" in out  # B200's bf16 rate, whole
    else:
        assert "num_tokens=8192" in out
    if width == 80:
        assert "left out to fit 80 columns" in out  # the caption names what a wider terminal shows


def test_piped_output_honours_columns_and_keeps_every_column_without_it(monkeypatch):
    monkeypatch.setenv("COLUMNS", "97")
    assert piped_width() == 97
    monkeypatch.delenv("COLUMNS")
    assert piped_width() == PIPED_WIDTH
    console = Console(record=True, width=piped_width(), color_system=None, file=io.StringIO())
    print_results(console, cpu_run_traces())
    text = console.export_text()
    assert "left out" not in text and "reason" in text  # a log keeps the reason column


@pytest.mark.parametrize("width", [80, 120, 160])
def test_run_tables_and_the_leaderboard_never_cut_a_number(width, stdout_kind, monkeypatch, capsys, tmp_path):
    """`run`'s tables as the command prints them (the console it picks for stdout; the gate prints the same, from
    the run inside it), and `leaderboard` in each of its formats, at COLUMNS=80/120/160, piped and on a terminal."""
    from solbench.cli.run import report_results
    from tests.report.conftest import write_traces

    monkeypatch.setenv("COLUMNS", str(width))
    traces = cpu_run_traces()
    report_results(traces, False, Console(stderr=True), None)
    out = capsys.readouterr().out
    assert not NUMBER_OR_AXIS.search(out), out
    assert max(len(line) for line in out.splitlines()) <= width
    assert "batch_size=4096" in out or width < 120  # an axis value, whole (at 80 it wraps inside its cell)
    path = write_traces(tmp_path / "t.jsonl", traces)
    for fmt in ("csv", "md", "json"):  # plain text: never fitted to a width, so never cut
        assert main(["leaderboard", str(path), "--format", fmt]) == 0
        board = capsys.readouterr().out
        assert "…" not in board and "torch_reference_eager" in board, board
