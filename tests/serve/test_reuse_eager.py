"""`solbench serve --reuse-eager-reference`: the eager reference timed once per workload and its samples
reused for later candidates, said in their traces; a default service times it with every candidate."""

from __future__ import annotations

from solbench import api
from solbench.spec.trace import Status
from tests.runner.conftest import write_problem
from tests.serve.conftest import FAST, GOOD, WRONG, Service

REUSED = "eager reference time reused"
GOOD_TOO = GOOD.replace("x * 2.0 + y", "y + 2.0 * x")  # another candidate (another content hash)


def reused(traces) -> list[bool]:
    return [any(REUSED in w for w in t.evaluation.warnings) for t in traces]


def reference_ms(traces) -> list[float]:
    return [t.evaluation.performance.reference_latency_ms for t in traces]


def test_a_service_asked_to_reuses_the_eager_reference_s_samples_and_says_so(tmp_path):
    problem = write_problem(tmp_path / "problem", sizes=(64, 96))
    with Service(tmp_path / "service", "--reuse-eager-reference") as service:
        client = api.Client(service.url)
        first, second, wrong = (client.evaluate(problem, source=source, **FAST) for source in (GOOD, GOOD_TOO, WRONG))
    assert [t.status for t in first + second] == [Status.PASSED] * 4
    assert reused(first) == [False, False] and reused(second) == [True, True]
    assert reference_ms(second) == reference_ms(first)  # the same samples, not a new measurement
    assert all(ms is not None and ms > 0 for ms in reference_ms(first))
    # Reuse saves the reference's timing, never a check: a wrong candidate is still judged wrong.
    assert [t.status for t in wrong] == [Status.INCORRECT_NUMERICAL] * 2


def test_a_default_service_times_the_eager_reference_with_every_candidate(service, tmp_path):
    problem = write_problem(tmp_path / "problem", sizes=(64,))
    client = api.Client(service.url)
    first, second = (client.evaluate(problem, source=source, **FAST) for source in (GOOD, GOOD_TOO))
    assert [t.status for t in first + second] == [Status.PASSED] * 2
    assert reused(first + second) == [False, False]
