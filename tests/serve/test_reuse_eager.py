"""`solbench serve` (by default): the eager reference timed once per workload and its samples reused for later
candidates, said in their traces; a service started with --no-reuse-eager-reference times it with every one."""

from __future__ import annotations

from solbench import api
from solbench.orchestrator import timed
from solbench.serve.reference_cache import ReferenceTimings
from solbench.spec.trace import Status
from tests.runner.conftest import write_problem
from tests.serve.conftest import FAST, GOOD, WRONG, Service

REUSED = "eager reference time reused"
# The reference's block settings follow the candidate's call time (argument slots by call length:
# timed.SLOTS_BY_CALL_S), and the samples are kept per settings. Candidates that sleep past the longest
# band's floor fall in that band however loaded the machine is (a load only makes a call longer); a 3 ms
# sleep once measured over 10 ms on a loaded CI machine and took the next band.
SLEEP_S = 1.2 * timed.SLOTS_BY_CALL_S[0][0]
SLEEPS = f"import time\n\ndef run(x, y):\n    time.sleep({SLEEP_S})\n"
GOOD_SLOW = GOOD.replace("def run(x, y):\n", SLEEPS)
GOOD_TOO = GOOD_SLOW.replace("x * 2.0 + y", "y + 2.0 * x")  # another candidate (another content hash)


def reused(traces) -> list[bool]:
    return [any(REUSED in w for w in t.evaluation.warnings) for t in traces]


def reference_ms(traces) -> list[float]:
    return [t.evaluation.performance.reference_latency_ms for t in traces]


def test_a_service_reuses_the_eager_reference_s_samples_and_says_so(tmp_path):
    problem = write_problem(tmp_path / "problem", sizes=(64, 96))
    with Service(tmp_path / "service") as service:
        client = api.Client(service.url)
        first, second, wrong = (client.evaluate(problem, source=source, **FAST) for source in (GOOD_SLOW, GOOD_TOO, WRONG))
    assert [t.status for t in first + second] == [Status.PASSED] * 4
    assert reused(first) == [False, False] and reused(second) == [True, True]
    assert reference_ms(second) == reference_ms(first)  # the same samples, not a new measurement
    assert all(ms is not None and ms > 0 for ms in reference_ms(first))
    # Reuse saves the reference's timing, never a check: a wrong candidate is still judged wrong.
    assert [t.status for t in wrong] == [Status.INCORRECT_NUMERICAL] * 2


def test_a_service_told_not_to_times_the_eager_reference_with_every_candidate(tmp_path):
    problem = write_problem(tmp_path / "problem", sizes=(64,))
    with Service(tmp_path / "service", "--no-reuse-eager-reference") as service:
        client = api.Client(service.url)
        first, second = (client.evaluate(problem, source=source, **FAST) for source in (GOOD_SLOW, GOOD_TOO))
    assert [t.status for t in first + second] == [Status.PASSED] * 2
    assert reused(first + second) == [False, False]


def test_kept_reference_times_survive_a_restart_one_line_each_and_a_cut_line_costs_only_its_entry(tmp_path):
    path = tmp_path / "reference_timings.jsonl"
    kept = ReferenceTimings(path)
    kept.put("shipped", 0.25)
    kept.put("eager", {"samples_ms": [0.5, 0.75], "inputs_reused": False, "inputs_fixed": True})
    kept.put("shipped", 0.3)  # measured again: the last line wins
    assert len(path.read_text().splitlines()) == 3  # appended, not the whole file rewritten
    with path.open("a") as lines:
        lines.write('{"key": "compile", "val')  # a crash in the middle of a line
    again = ReferenceTimings(path)
    assert again.get("shipped") == 0.3
    assert again.get("eager") == {"samples_ms": [0.5, 0.75], "inputs_reused": False, "inputs_fixed": True}
    assert again.get("compile") is None
