"""Trace lines are signed by the orchestrator (report/signing.py): on resume, a line its key did not sign
is refused (issue 20, class 4), the valid ones are kept, and reports never see the refused ones."""

from __future__ import annotations

import json

from solbench.report import signing
from solbench.report.traces import TraceFile, read_traces
from tests.report.conftest import make_trace, write_traces


def test_signed_lines_are_kept_and_forged_ones_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    traces = TraceFile(path)
    traces.append(make_trace(uuid="w0", status="INCORRECT_NUMERICAL"))
    traces.append(make_trace(uuid="w1"))
    lines = path.read_text().splitlines()
    assert all(signing.verify(traces.key, line) for line in lines)
    # Forgeries: a failed line turned PASSED with its signature kept, an unsigned PASSED line, a made-up signature.
    edited = lines[0].replace('"INCORRECT_NUMERICAL"', '"PASSED"')
    unsigned = json.dumps(make_trace(uuid="w2").to_dict(), separators=(",", ":"))
    made_up = signing.sign(b"k" * 32, json.dumps(make_trace(uuid="w3").to_dict(), separators=(",", ":")))
    with open(path, "a") as f:
        f.write("\n".join([edited, unsigned, made_up]) + "\n")
    resumed = TraceFile(path)
    assert resumed.refused_lines == 3
    assert resumed.is_done("rmsnorm", "h-fast", "w0") and resumed.is_done("rmsnorm", "h-fast", "w1")
    assert not resumed.is_done("rmsnorm", "h-fast", "w2") and not resumed.is_done("rmsnorm", "h-fast", "w3")
    assert path.read_text().splitlines() == lines
    assert len(resumed.refused_path.read_text().splitlines()) == 3
    assert [t.status.value for t in read_traces([path])] == ["INCORRECT_NUMERICAL", "PASSED"]
    resumed.append(make_trace(uuid="w2"))  # evaluated again, signed
    assert TraceFile(path).refused_lines == 0


def test_a_file_written_before_signing_stays_unsigned_and_says_so(tmp_path):
    path = write_traces(tmp_path / "old.jsonl", [make_trace(uuid="w0"), make_trace(uuid="w1")])
    old = TraceFile(path)
    assert old.unsigned and old.refused_lines == 0 and old.done_count == 2
    old.append(make_trace(uuid="w2"))
    assert not signing.is_signed(path.read_text().splitlines()[-1])


def test_keys_live_outside_the_trace_folder_and_are_private(tmp_path):
    path = tmp_path / "t.jsonl"
    TraceFile(path)
    key = signing.key_path(path)
    assert key.is_file() and tmp_path not in key.parents
    assert key.stat().st_mode & 0o077 == 0 and key.parent.stat().st_mode & 0o077 == 0


def test_reports_skip_lines_a_signed_files_key_did_not_sign(tmp_path):
    path = tmp_path / "t.jsonl"
    TraceFile(path).append(make_trace(uuid="w0", status="RUNTIME_ERROR"))
    with open(path, "a") as f:
        f.write(json.dumps(make_trace(uuid="w1").to_dict(), separators=(",", ":")) + "\n")
    assert [t.workload_uuid for t in read_traces([path])] == ["w0"]
