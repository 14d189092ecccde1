"""Every hostile solution ends with its expected failure status (never PASSED); every legitimate but
unusual one PASSES. All cases run in one scheduler run on a tiny fp32 CPU problem (one reference
worker, a fresh worker per solution), so the suite stays fast; GPU-only cases run under `-m gpu`.
"""

from __future__ import annotations

import pytest

from solbench.spec.trace import Status
from solbench.worker.cupti_activity import load_cupti
from tests.anticheat.suite import (
    RMSNORM,
    Case,
    discover,
    missing_flags,
    missing_needs,
    run_cases,
    write_problem,
)
from tests.conftest import HAS_CUDA

ALL_CASES = discover()
CPU_CASES = [c for c in ALL_CASES if not c.gpu]


def _describe(traces) -> str:
    return "\n".join(f"{t.workload_uuid}: {t.status} {t.evaluation.log[-1500:]}" for t in traces)


def check_case(case: Case, traces, device: str = "cpu") -> None:
    assert traces, f"{case.id}: no traces"
    statuses = [t.status for t in traces]
    assert Status.PASSED not in statuses or case.kind == "legit", f"{case.id} PASSED:\n{_describe(traces)}"
    allowed = {Status(s) for s in case.allowed}
    assert all(s in allowed for s in statuses), f"{case.id}: expected {case.expect}\n{_describe(traces)}"
    for fragment in case.logs:
        log = traces[0].evaluation.log
        assert any(f in log for f in fragment.split("|")), f"{case.id}: {fragment!r} not in the log\n{_describe(traces)}"
    missing = missing_flags(case, traces, device)
    assert not missing, f"{case.id}: flags {missing} missing\n{_describe(traces)}"


def test_suite_is_big_enough():
    hostile = [c for c in ALL_CASES if c.kind == "hostile"]
    legit = [c for c in ALL_CASES if c.kind == "legit"]
    assert len(hostile) >= 15 and len(legit) >= 6
    assert all(c.expect != "PASSED" for c in hostile)
    assert all(c.expect == "PASSED" for c in legit)
    # issue 21: an agent-style corpus on the multi-shape problem, at least half of it runnable on CPU
    agent_style = [c for c in legit if c.problem == RMSNORM]
    assert len(agent_style) >= 10 and sum(not c.gpu for c in agent_style) >= 5


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory):
    """Every CPU case in one scheduler run, shared by this file's tests (`--dist loadfile` keeps them in one
    process, so the run happens once)."""
    problem = write_problem(tmp_path_factory.mktemp("anticheat_cpu"))
    return run_cases(CPU_CASES, problem, "cpu", parallel=3)


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.id)
def test_cpu_case(case: Case, cpu_results):
    check_case(case, cpu_results[case.id])


def test_static_and_runtime_warnings_reach_traces(cpu_results):
    def warnings(case_id):
        return " | ".join(w for t in cpu_results[case_id] for w in t.evaluation.warnings)

    assert "f_back" in warnings("hostile/frame_forge_reply")
    assert "imports gc" in warnings("hostile/gc_find_channel")
    assert "reseeds the global RNG" in warnings("hostile/reseed_and_predict")
    # the audit hook's warnings (not alarms) for a legitimate solution: torch.compile's own env writes
    assert "runtime: os.putenv" in warnings("legit/torch_compile")


@pytest.fixture(scope="module")
def gpu_results(tmp_path_factory):
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    problem = write_problem(tmp_path_factory.mktemp("anticheat_gpu"))
    return run_cases([c for c in ALL_CASES if not missing_needs(c)], problem, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_gpu_case(case: Case, gpu_results):
    reason = missing_needs(case)
    if reason:
        pytest.skip(reason)
    check_case(case, gpu_results[case.id], "cuda")


def test_a_case_that_only_cupti_catches_says_so():
    """Without cupti-python the escaped-work probe cannot see a few microseconds of side-stream work: such a
    case is skipped with that reason instead of failing as if a defence had broken."""
    tiny = next(c for c in ALL_CASES if c.name == "side_stream_capture_breaker_tiny")
    assert tiny.needs == ["cupti"] and tiny.kind == "hostile" and tiny.gpu
    reason = missing_needs(tiny)
    assert (reason is None) == (load_cupti() is not None)
    assert reason is None or "cupti-python" in reason
    assert all(missing_needs(c) is None for c in ALL_CASES if not c.needs)
