"""Reuse keyed by content (issue 47, finding 1) through a real `solbench serve`: the hostile cases (a problem of
the real one's name and workload uuid but other content, sent first) never change an honest candidate's
reference time or speedup; the legit case (the same content again) still shares the record."""

from __future__ import annotations

import pytest

from solbench import api
from tests.anticheat.reuse_cases import CASES, CPU, GPU, run_cases
from tests.serve.conftest import FAST, Service

pytest.importorskip("aiohttp", reason="solbench serve needs aiohttp: pip install 'solbench[serve]'")


def check(results: dict) -> None:
    assert set(results) == {case.id for case in CASES}
    failed = {case_id: seen for case_id, (held, seen) in results.items() if not held}
    assert not failed, failed


def test_reuse_cases_on_the_cpu(tmp_path):
    with Service(tmp_path / "service") as service:
        check(run_cases(api.Client(service.url), tmp_path, CPU, FAST))


@pytest.mark.gpu
def test_reuse_cases_on_a_gpu(tmp_path):
    options = {"trials": 2, "timing_rounds": 1, "timeout_s": 300.0}  # the timer's own settings otherwise
    with Service(tmp_path / "service", device="cuda:0") as service:
        check(run_cases(api.Client(service.url), tmp_path, GPU, options))
