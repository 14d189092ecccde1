"""`solbench leaderboard` and `solbench report`: outputs, formats and exit codes (0 / 1 conflicts / 2 bad input)."""

from __future__ import annotations

import json

import pandas as pd

from solbench.cli import main
from tests.report.conftest import make_trace, sample_traces, write_traces


def test_leaderboard_csv_and_format_from_suffix(tmp_path, capsys):
    traces = write_traces(tmp_path / "t.jsonl", sample_traces())
    assert main(["leaderboard", str(traces), "-o", str(tmp_path / "out" / "lb.csv")]) == 0
    frame = pd.read_csv(tmp_path / "out" / "lb.csv")
    assert set(frame["level"]) == {"problem", "solution"} and len(frame) == 9
    assert main(["leaderboard", str(traces), "-o", str(tmp_path / "lb.json")]) == 0
    assert json.loads((tmp_path / "lb.json").read_text())["rows"]
    capsys.readouterr()
    assert main(["leaderboard", str(traces), "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("| level |")


def test_merging_runs_reports_duplicates_and_conflicts(tmp_path, capsys):
    a = write_traces(tmp_path / "a.jsonl", [make_trace(uuid="w0"), make_trace(uuid="w1")])
    b = write_traces(tmp_path / "b.jsonl", [make_trace(uuid="w0", timestamp="2026-05-05"),
                                            make_trace(uuid="w1", status="RUNTIME_ERROR", timestamp="2026-05-05")])
    assert main(["leaderboard", str(a), str(b), "-o", str(tmp_path / "lb.csv")]) == 1
    err = capsys.readouterr().err
    assert "1 older result(s) superseded" in err and "conflict:" in err and "RUNTIME_ERROR" in err
    assert pd.read_csv(tmp_path / "lb.csv")["conflicts"].iloc[0] == 1
    assert main(["report", str(a), str(b), "-o", str(tmp_path / "r.html")]) == 1
    assert "conflicting duplicate" in (tmp_path / "r.html").read_text()


def test_bad_input_exits_2_with_a_message(tmp_path, capsys):
    good = write_traces(tmp_path / "t.jsonl", [make_trace()])
    bad = write_traces(tmp_path / "bad.jsonl", [make_trace(uuid="w1")], extra_lines=["{oops", "[]"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for command in ("leaderboard", "report"):
        for args in ([str(tmp_path / "missing.jsonl")], [str(good), str(bad)], [str(empty)]):
            assert main([command, *args, "-o", str(tmp_path / "o.txt")]) == 2, (command, args)
            err = capsys.readouterr().err
            assert err.startswith("error:") and "Traceback" not in err
    assert main(["leaderboard", str(bad), "-o", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert "2 malformed trace line(s)" in err and "line(s) 2, 3" in err
    assert main(["leaderboard", str(good), str(bad), "--skip-malformed", "-o", str(tmp_path / "o.csv")]) == 0
    assert "skipped 2 malformed" in capsys.readouterr().err


def test_report_writes_one_self_contained_file(tmp_path):
    traces = write_traces(tmp_path / "t.jsonl", sample_traces())
    out = tmp_path / "site" / "report.html"
    assert main(["report", str(traces), "-o", str(out), "--title", "nightly"]) == 0
    page = out.read_text()
    assert "<title>nightly</title>" in page and page.count("<svg") >= 4 and list(out.parent.iterdir()) == [out]
