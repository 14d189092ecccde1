"""The regression gate: slower than recorded by more than P *and* beyond the measured noise."""

from __future__ import annotations

import pytest

from solbench.report.leaderboard import leaderboard
from solbench.report.regression import check, parse_fraction
from solbench.spec.errors import SpecError
from tests.report.conftest import make_trace


def run(latency_ms, rel_ci=0.02, uuids=("w0", "w1"), hardware="NVIDIA H100 80GB HBM3", solution_hash=None):
    return [make_trace(uuid=u, latency_ms=latency_ms, rel_ci=rel_ci, hardware=hardware, solution_hash=solution_hash)
            for u in uuids]


BASELINE = leaderboard(run(1.0))


def test_slower_beyond_tolerance_and_noise_fails():
    verdict = check(run(1.5, solution_hash="changed"), BASELINE, 0.05)  # the gate matches by name, not hash
    assert verdict.regressed and verdict.comparable and "+50.0%" in verdict.message


def test_slower_within_noise_passes():
    verdict = check(run(1.1, rel_ci=0.2), BASELINE, 0.05)
    assert not verdict.regressed and verdict.comparable and "noise" in verdict.message


def test_within_tolerance_or_faster_passes():
    assert not check(run(1.04), BASELINE, 0.05).regressed
    assert not check(run(0.5), BASELINE, 0.05).regressed
    assert check(run(1.04, rel_ci=0.001), BASELINE, 0.0).regressed  # zero tolerance: any slowdown beyond noise


def test_without_intervals_only_the_tolerance_applies():
    verdict = check(run(1.1, rel_ci=None), leaderboard(run(1.0, rel_ci=None)), 0.05)
    assert verdict.regressed and "only the tolerance" in verdict.message


def test_not_comparable_cases_are_not_failures():
    other_set = check(run(5.0, uuids=("w0",)), BASELINE, 0.05)
    assert not other_set.regressed and not other_set.comparable and "differ" in other_set.message
    other_hw = check(run(5.0, hardware="NVIDIA H200"), BASELINE, 0.05)
    assert not other_hw.comparable and "no recorded result" in other_hw.message


def test_parse_fraction():
    assert parse_fraction("5%") == pytest.approx(0.05) and parse_fraction("0.1") == pytest.approx(0.1)
    for bad in ("-1", "fast", "nan"):
        with pytest.raises(SpecError):
            parse_fraction(bad)
