"""Ctrl-C or SIGTERM at random moments of `solbench run`: a clean end every time (issue 48).

A few of `benchmarks/interrupt_check.py`'s checks, at random delays from start-up (imports, workers starting)
to the timed blocks: no traceback, exit 130 or 143 (0 when it had finished), no process left running, every
trace line parses, as many as the command said it kept, and every file it names exists. The benchmark runs
50 of them, and `serve` and `submit`.
"""

from __future__ import annotations

import os
import random
import signal

from tests.scripts import benchmark_script

INTERRUPTS = 8
MAX_DELAY_S = 6.0


def test_run_ends_cleanly_whenever_it_is_interrupted(tmp_path):
    seed = int(os.environ.get("SOLBENCH_INTERRUPT_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    with benchmark_script("interrupt_check.py") as check:
        outcomes = []
        for _ in range(INTERRUPTS):
            signum = rng.choice((signal.SIGINT, signal.SIGTERM))
            outcomes.append(check.check_run(tmp_path, rng.uniform(0.0, MAX_DELAY_S), signum, max_workloads=1))
    failed = [o.line() for o in outcomes if o.problems]
    assert not failed, f"seed {seed} (SOLBENCH_INTERRUPT_SEED):\n" + "\n".join(failed)
    assert {o.code for o in outcomes} <= {0, 130, 143}
