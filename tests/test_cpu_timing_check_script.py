"""`benchmarks/cpu_timing_check.py`'s yardsticks and checks (issue 48), without timing anything."""

from __future__ import annotations

import torch

from tests.scripts import benchmark_script


def test_redraw_gives_floating_inputs_new_values_in_place_and_leaves_the_rest():
    with benchmark_script("cpu_timing_check.py") as check:
        x, index = torch.zeros(64), torch.arange(8)
        address = x.data_ptr()
        inputs = [x, index, 3, None]
        check.redraw(inputs)
        assert x.data_ptr() == address and x.abs().sum() > 0  # new values, the same tensor
        assert torch.equal(index, torch.arange(8)) and inputs[2:] == [3, None]


def test_single_calls_run_the_hook_before_every_call_outside_its_time():
    with benchmark_script("cpu_timing_check.py") as check:
        seen = []
        wall, same = check.single_calls(lambda *a: seen.append("call"), [], 3, before=lambda i: seen.append("draw"))
        assert seen == ["draw", "call"] * 3 and len(wall) == len(same) == 3


def test_solbench_is_judged_against_the_plain_loop_on_fresh_inputs():
    """Within 2x of `ti fresh` passes even where the fixed-set median is 3x less (the cost of fresh inputs,
    reported apart); beyond 2x of `ti fresh` fails."""
    with benchmark_script("cpu_timing_check.py") as check:
        def row(solbench_ms, fresh_ms):
            return check.Row("p", "n=1", solbench_ms=solbench_ms, reference_ms=solbench_ms, timeit_same_clock_ms=0.1,
                             timeit_fresh_ms=fresh_ms)
        assert check.checks("idle", {("p", "n=1"): row(0.3, 0.25)}, None) == []
        failures = check.checks("idle", {("p", "n=1"): row(0.3, 0.1)}, None)
        assert len(failures) == 1 and "redrawn" in failures[0]


def test_the_worker_draw_writes_the_sets_a_timed_block_draws_for_new_seeds_in_place():
    from solbench.inputs.generate import make_inputs
    from solbench.spec.problem import check_workload, load_problem
    from tests.scripts import BENCHMARKS

    problem = load_problem(BENCHMARKS.parent / "problem_defs" / "core" / "layernorm_fp32_h1024")
    workload = problem.workloads[0]
    axes = check_workload(problem.definition, workload)
    with benchmark_script("cpu_timing_check.py") as check:
        inputs = make_inputs(problem.definition, workload, axes, seed=0, device="cpu")
        addresses = [t.data_ptr() for t in inputs]
        draw = check.worker_draw(problem, workload, axes)
        for seed in (1, 2):
            draw(inputs)
            expected = make_inputs(problem.definition, workload, axes, seed=seed, device="cpu")
            assert [t.data_ptr() for t in inputs] == addresses  # the call's own tensors, new values
            assert all(torch.equal(t, e) for t, e in zip(inputs, expected))
