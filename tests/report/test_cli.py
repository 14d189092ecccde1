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


def test_leaderboard_merges_into_an_existing_csv_and_keeps_other_hardware(tmp_path, capsys):
    """The README's leaderboard line once replaced the shipped GPU rows with two CPU rows, silently."""
    board = tmp_path / "lb.csv"
    gpu = write_traces(tmp_path / "gpu.jsonl", sample_traces())
    assert main(["leaderboard", str(gpu), "-o", str(board)]) == 0
    before = pd.read_csv(board)
    cpu = write_traces(tmp_path / "cpu.jsonl", [make_trace("rmsnorm_h4096", "triton_fast", "c0", hardware="cpu"),
                                                make_trace("rmsnorm_h4096", "triton_fast", "c1", hardware="cpu")])
    capsys.readouterr()
    assert main(["leaderboard", str(cpu), "-o", str(board)]) == 0
    assert "1 row(s) added, 0 replaced, 5 kept" in capsys.readouterr().err
    after = pd.read_csv(board)
    gpu_rows = after[after["hardware"] != "cpu"].reset_index(drop=True)
    pd.testing.assert_frame_equal(gpu_rows, before)  # every GPU row, summaries included, untouched
    cpu_rows = after[after["hardware"] == "cpu"]
    assert sorted(cpu_rows["level"]) == ["problem", "solution"] and set(cpu_rows["workloads"]) == {2}
    # the same solution, problem and hardware measured again replaces its row and its summary
    again = write_traces(tmp_path / "again.jsonl", [make_trace("rmsnorm_h4096", "triton_fast", "c0",
                                                               hardware="cpu", latency_ms=4.0)])
    assert main(["leaderboard", str(again), "-o", str(board)]) == 0
    assert "0 row(s) added, 1 replaced, 5 kept" in capsys.readouterr().err
    final = pd.read_csv(board)
    row = final[(final["hardware"] == "cpu") & (final["level"] == "problem")]
    assert len(final) == len(after) and row["workloads"].item() == 1 and row["geomean_latency_ms"].item() == 4.0
    # --replace overwrites the whole file
    assert main(["leaderboard", str(again), "-o", str(board), "--replace"]) == 0
    assert set(pd.read_csv(board)["hardware"]) == {"cpu"}


def test_leaderboard_refuses_to_merge_into_a_non_csv_file(tmp_path, capsys):
    traces = write_traces(tmp_path / "t.jsonl", sample_traces())
    out = tmp_path / "lb.md"
    out.write_text("kept\n")
    assert main(["leaderboard", str(traces), "-o", str(out)]) == 2
    assert "--replace" in capsys.readouterr().err and out.read_text() == "kept\n"
    assert main(["leaderboard", str(traces), "-o", str(out), "--replace"]) == 0
    assert out.read_text().startswith("| level |")
