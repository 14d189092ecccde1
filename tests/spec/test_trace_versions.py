"""Trace format versions: older lines load (migrated), a newer version is refused in one line, and the
shipped leaderboard CSV still loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solbench.report.leaderboard import older_format_note, read_leaderboard
from solbench.report.traces import read_trace_lines
from solbench.spec import SpecError, Trace
from solbench.spec.trace_versions import MIGRATIONS, TRACE_SCHEMA, migrate

ROOT = Path(__file__).resolve().parents[2]
V1_LINES = (Path(__file__).parent / "data" / "traces_v1.jsonl").read_text().splitlines()


def test_a_version_1_line_is_written_back_unchanged_but_for_its_version():
    """Lines `solbench run` wrote before the typed models (a CPU run of rmsnorm_h4096) load, and write
    back field for field, value for value; only `schema` (and the per-file `signature`) differ."""
    for line in V1_LINES:
        old = json.loads(line)
        assert old["schema"] == "solbench.trace/1"
        new = Trace.from_dict(old).to_dict()
        assert new["schema"] == TRACE_SCHEMA
        old.pop("signature")
        assert {k: v for k, v in new.items() if k != "schema"} == {k: v for k, v in old.items() if k != "schema"}


def test_version_1_leniencies_are_migrated():
    old = json.loads(V1_LINES[0])
    old["evaluation"]["correctness"]["flags"] = None
    old["evaluation"]["correctness"]["numerics"] = ["not", "a", "mapping"]
    old["evaluation"]["phases_s"] = {"load": 0.5, "note": "text", "flag": True}
    trace = Trace.from_dict(old)
    assert trace.evaluation.correctness.flags == []
    assert trace.evaluation.correctness.numerics is None
    assert trace.evaluation.phases_s == {"load": 0.5}
    assert trace.evaluation.environment.libs["torch"] == trace.evaluation.environment.torch


def test_a_newer_version_is_refused_in_one_line():
    data = json.loads(V1_LINES[0])
    data["schema"] = "solbench.trace/9"
    with pytest.raises(SpecError) as raised:
        Trace.from_dict(data)
    message = str(raised.value)
    assert "\n" not in message
    assert "'solbench.trace/9' is not one this solbench reads" in message and TRACE_SCHEMA in message
    traces, bad = read_trace_lines([V1_LINES[0], json.dumps(data)])
    assert (len(traces), bad) == (1, 1)


def test_every_version_reaches_the_current_one():
    for version in MIGRATIONS:
        data = migrate({"schema": version} if version else {})
        assert data["schema"] == TRACE_SCHEMA


def test_a_field_of_the_wrong_type_is_named():
    data = json.loads(V1_LINES[0])
    data["evaluation"]["performance"]["latency"]["n"] = "many"
    with pytest.raises(SpecError, match=r"^evaluation\.performance\.latency\.n: must be an integer, got 'many'$"):
        Trace.from_dict(data)


def test_the_shipped_leaderboard_csv_loads():
    path = ROOT / "leaderboard" / "leaderboard.csv"
    frame = read_leaderboard(path)  # regenerated on 2026-11-28: the current format, so no note
    assert len(frame) > 0 and {"solution", "problem", "geomean_latency_ms", "numerics_flagged"} <= set(frame.columns)
    assert older_format_note(frame, path) is None


def test_sol_record_is_typed_and_keeps_keys_it_does_not_list():
    data = json.loads(V1_LINES[0])
    data["evaluation"]["sol"]["x_new_figure"] = 1.5
    assert Trace.from_dict(data).to_dict()["evaluation"]["sol"]["x_new_figure"] == 1.5
    data["evaluation"]["sol"]["t_sol_ms"] = "fast"
    with pytest.raises(SpecError, match=r"^evaluation\.sol\.t_sol_ms: must be"):
        Trace.from_dict(data)


def test_a_field_of_several_types_says_what_each_would_need():
    data = json.loads(V1_LINES[0])
    data["evaluation"]["sol"]["score"] = "high"
    with pytest.raises(SpecError, match=r"^evaluation\.sol\.score: must be an integer or a number, got 'high'$"):
        Trace.from_dict(data)
