"""The analyser on the 235 shared SOL-ExecBench problems (skipped without ../shared)."""

from __future__ import annotations

import pytest

from solbench.sol.analyser import analyse_workload, sol_time_ms
from solbench.sol.hardware import load_spec
from solbench.spec.problem import discover_problems, load_problem
from tests.scripts import benchmark_script


def test_every_shared_problem_gets_a_bound(sol_execbench_dir):
    """First workload of every problem, both conventions: a positive bound, fallbacks said out loud."""
    hw = load_spec("B200")
    paths = discover_problems(sol_execbench_dir)
    assert len(paths) == 235
    fallbacks = []
    for path in paths:
        problem = load_problem(path)
        workload = problem.workloads[0]
        for convention in ("strict", "solar"):
            cost = analyse_workload(problem.definition, workload, convention=convention)
            bound = sol_time_ms(cost, hw)
            assert bound.t_sol_ms > 0, problem.name
            # solar, like the published bounds, moves bool tensors for free (docs/sol.md): a
            # problem whose only outputs are bool masks may cost no bytes there, never in strict
            all_bool_out = all(o.dtype == "bool" for o in problem.definition.outputs.values())
            if convention == "strict" or not all_bool_out:
                assert cost.bytes_min > 0, (problem.name, convention)
            else:
                assert cost.bytes_min == 0 and cost.output_bytes > 0, problem.name
        if cost.method == "declared-io":
            fallbacks.append(problem.name)
            assert cost.unknown_ops and cost.notes  # never a silent zero
        if cost.method == "meta-approx":
            assert any("approximate" in n for n in cost.notes)
    assert len(fallbacks) <= 15, fallbacks


def test_solar_agrees_with_published_b200_bounds(sol_execbench_dir):
    with benchmark_script("solar_calibration.py") as module:
        result = module.calibration_agreement(sol_execbench_dir)
    print(f"solar agreement: median {result['median_ratio']:.3f}, spread x{result['geo_spread']:.3f}, "
          f"{result['within_10pct']:.0%} within 10 %")
    assert result["workloads"] == 155
    assert 0.95 <= result["median_ratio"] <= 1.05
    assert result["within_10pct"] >= 0.8


def test_strict_discounts_causal_attention_in_a_shared_problem(sol_execbench_dir):
    matches = sorted(sol_execbench_dir.glob("L1/067_flash_attention_gqa_ultralong"))
    if not matches:
        pytest.skip("problem L1/067 not in the shared data")
    problem = load_problem(matches[0])
    workload = max(problem.workloads, key=lambda w: w.axes["seq_len"])
    length = workload.axes["seq_len"]
    strict = analyse_workload(problem.definition, workload, convention="strict")
    solar = analyse_workload(problem.definition, workload, convention="solar")
    assert any("masked-off" in n for n in strict.notes)
    # the attention part shrinks to L(L+1)/2 of L^2; projections stay: strict is well below solar
    assert strict.flops_matmul_total < solar.flops_matmul_total * (0.5 + 1 / length + 0.2)
