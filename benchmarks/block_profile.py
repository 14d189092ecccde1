"""Where a timed block's harness time goes, in process, on one device: the block's phases and a profile.

    python benchmarks/block_profile.py PROBLEM_DIR [--solution FILE] [--device cuda] [--blocks 6] [--top 30]

Loads the reference (or `--solution`) the way a worker does, then runs `--blocks` timed blocks of the first
workload with the run's default timing settings (CUDA graphs, the escaped-work probe on the last block,
checked outputs), under cProfile. Prints each block's `phases_s` and the functions with the most cumulative
time; the timed loop's own entries stay in, for scale. Made to find what the end of a block costs on a GPU
(issue 31: `timing.checks`, `timing.release` and `timing.other` took 2.5 s more than fe9e8ce over issue 15's
40 workloads on an H200), where a worker process cannot be profiled from outside. No sandbox and no audit
hook: what they cost shows in a real run's phases, not here.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install needed
from solbench.orchestrator.config import RunConfig  # noqa: E402
from solbench.protocol import messages as msg  # noqa: E402
from solbench.spec.problem import load_problem  # noqa: E402
from solbench.spec.solution import load_solution, reference_solution  # noqa: E402
from solbench.worker import calls, timed_block  # noqa: E402
from solbench.worker.state import WorkerState  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("--solution", type=Path, help="a solution file (default: the reference)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()

    problem = load_problem(args.problem)
    solution = (load_solution(args.solution, problem.definition) if args.solution
                else reference_solution(problem.definition))
    state = WorkerState(args.device)
    work_dir = tempfile.mkdtemp(prefix="solbench_block_profile_")
    calls.handle_load(state, msg.Load(definition=problem.definition, solution=solution, work_dir=work_dir))
    workload = problem.workloads[0]
    calls.handle_call(state, msg.Call(workload=workload, seed=1))  # as the trials do first
    timing = RunConfig(device=args.device).timing_config(args.device)

    def block(k: int) -> msg.Timed:
        last = k == args.blocks - 1
        return timed_block.handle_time(state, msg.Time(workload=workload, seeds=[11, 12], config=timing,
                                                       checked_outputs=2, probe=last and state.is_cuda,
                                                       block_key=1000 + k))

    block(0)  # warm: first captures, lazy initialisation
    profile = cProfile.Profile()
    profile.enable()
    replies = [block(k) for k in range(args.blocks)]
    profile.disable()
    for k, reply in enumerate(replies):
        print(f"block {k}: {len(reply.samples_ms)} samples, phases_s {reply.phases_s}")
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.top)
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
