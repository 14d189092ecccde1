"""The anti-cheat suite through `solbench serve` gives the suite's verdicts: a sample of its CPU cases here
(the problem folder written into, inputs mutated, the timer patched, answers cached, a forged harness
failure, a multi-file JSON solution); the whole suite: benchmarks/anticheat_gpu.py --serve."""

from __future__ import annotations

from solbench import api
from tests.anticheat.served import submit_cases
from tests.anticheat.suite import discover
from tests.anticheat.test_suite import check_case

SAMPLE = ("hostile/write_problem_files", "hostile/mutate_inputs", "hostile/patch_timer_function",
          "hostile/cache_by_value", "hostile/raise_harness_failure", "legit/multi_file")


def test_a_sample_of_the_anticheat_suite_through_the_service_gets_the_suite_s_verdicts(service, tmp_path):
    cases = [c for c in discover() if c.id in SAMPLE]
    assert len(cases) == len(SAMPLE)
    results = submit_cases(cases, tmp_path, api.Client(service.url))
    for case in cases:
        check_case(case, results[case.id])
