"""`solbench serve` on a GPU: the shipped rmsnorm problem's PyTorch and Triton solutions and its reference give
the verdicts of one-off runs, each solution in a fresh process, and a second candidate reuses the baseline's time."""

from __future__ import annotations

import pytest

from solbench import api
from tests.conftest import REPO_ROOT
from tests.serve.conftest import Service

PROBLEM = REPO_ROOT / "problem_defs" / "core" / "rmsnorm_h4096"
SOLUTIONS = REPO_ROOT / "solutions" / "rmsnorm_h4096"


@pytest.mark.gpu
def test_serve_on_a_gpu_gives_one_off_verdicts(tmp_path):
    candidates = [SOLUTIONS / "torch_rmsnorm.py", SOLUTIONS / "triton_rmsnorm.py", None]
    one_off = [[t.status.value for t in api.evaluate(PROBLEM, c, device="cuda", max_workloads=2)] for c in candidates]
    service = Service(tmp_path / "service", device="cuda")
    try:
        client = api.Client(service.url)
        served = [client.evaluate(PROBLEM, c, max_workloads=2) for c in candidates]
        assert [[t.status.value for t in traces] for traces in served] == one_off
        assert all(t.evaluation.environment.device == "cuda" for traces in served for t in traces)
        assert client.health()["submissions"]["done"] == 3
        # the problem's shipped baseline (sent with it) was timed for the first candidate, reused after
        assert not any("baseline time reused" in w for t in served[0] for w in t.evaluation.warnings)
        assert all(any("shipped baseline time reused" in w for w in t.evaluation.warnings) for t in served[1])
    finally:
        service.stop()
