"""Merging traces from several runs: duplicates resolved by the documented rules, conflicts set aside."""

from __future__ import annotations

import pytest

from solbench.report.merge import load_sourced, merge
from solbench.spec.errors import SpecError
from tests.report.conftest import make_trace, write_traces

OLD, NEW = "2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"


def test_same_status_keeps_the_latest_whatever_the_order():
    old, new = make_trace(latency_ms=2.0, timestamp=OLD), make_trace(latency_ms=1.0, timestamp=NEW)
    for order in ([old, new], [new, old]):
        result = merge(order)
        assert [t.evaluation.performance.latency_ms for t in result.traces] == [1.0]
        assert result.superseded == 1 and not result.conflicts


def test_skipped_copy_gives_way_to_a_real_result():
    result = merge([make_trace(status="PASSED", timestamp=OLD), make_trace(status="SKIPPED", timestamp=NEW)])
    assert [t.status.value for t in result.traces] == ["PASSED"]
    assert result.skipped_duplicates == 1 and not result.conflicts


def test_conflicting_statuses_are_set_aside_and_reported(tmp_path):
    a = write_traces(tmp_path / "a.jsonl", [make_trace(uuid="w0"), make_trace(uuid="w1")])
    b = write_traces(tmp_path / "b.jsonl", [make_trace(uuid="w0", status="TIMEOUT", timestamp=NEW)])
    result = merge(load_sourced([a, b]).traces)
    assert [t.workload_uuid for t in result.traces] == ["w1"]
    assert len(result.conflicts) == 1
    text = result.conflicts[0].describe()
    assert "PASSED" in text and "TIMEOUT" in text and "a.jsonl:1" in text and "b.jsonl:1" in text
    assert result.conflict_counts() == {("rmsnorm", "h-fast", "NVIDIA H100 80GB HBM3"): 1}


def test_other_hardware_or_other_code_is_not_a_duplicate():
    traces = [make_trace(), make_trace(hardware="NVIDIA H200"), make_trace(solution_hash="other", status="TIMEOUT")]
    result = merge(traces)
    assert len(result.traces) == 3 and not result.conflicts and result.superseded == 0


def test_load_counts_malformed_lines_and_reads_folders(tmp_path):
    write_traces(tmp_path / "runs" / "a.jsonl", [make_trace()], extra_lines=["{not json", '{"definition": "x"}'])
    write_traces(tmp_path / "runs" / "sub" / "b.jsonl", [make_trace(uuid="w9")])
    loaded = load_sourced([tmp_path / "runs"])
    assert len(loaded.traces) == 2
    assert list(loaded.malformed.values()) == [[2, 3]]
    with pytest.raises(SpecError, match="does not exist"):
        load_sourced([tmp_path / "missing.jsonl"])
