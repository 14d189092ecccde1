"""Each worker freezes the harness (torch and triton included) out of the garbage collector before any
solution code runs: a collection after each `load` walked those ~180,000 objects every time (70-90 ms
per problem on a GPU host, paid by the next request)."""

from __future__ import annotations

from solbench import api
from solbench.spec.trace import Status
from tests.runner.conftest import write_solution

FROZEN_AT_LEAST = 50_000  # torch alone leaves well over this many objects; an unfrozen process has 0


def test_the_harness_is_frozen_before_solution_code_runs(problem_dir, fast_config, tmp_path):
    solution = write_solution(tmp_path, f"""
        import gc

        FROZEN = gc.get_freeze_count()  # at import: what the worker froze before loading this file

        def run(x, y):
            # the right answer only where the harness was frozen first
            return x * 2.0 + y if FROZEN >= {FROZEN_AT_LEAST} else x
    """)
    traces = api.evaluate(problem_dir, solution, config=fast_config)
    assert traces and [t.status for t in traces] == [Status.PASSED] * len(traces), [
        (t.status, t.evaluation.log[-400:]) for t in traces]
